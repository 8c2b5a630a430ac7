"""Forked ranks wait at the start gate until every rank is forked (``starters.start_gate``): with
real forks, and from inside a real kernel."""

import os
import select
from textwrap import dedent

from notebook_launcher.starters.start_gate import StartGate


def _fork_through(gate, report):
    pid = os.fork()
    if pid == 0:
        try:
            gate.pass_through()
            os.write(report, b"in\n")
        finally:
            os._exit(0)
    return pid


def _passed(report_read, count, timeout):
    got = b""
    while got.count(b"\n") < count and select.select([report_read], [], [], timeout)[0]:
        got += os.read(report_read, 64)
    return got.count(b"\n")


def test_forked_processes_pass_only_once_the_gate_opens():
    report_read, report_write = os.pipe()
    gate = StartGate()
    pids = [_fork_through(gate, report_write) for _ in range(2)]
    try:
        assert _passed(report_read, 1, timeout=0.2) == 0  # held: nothing passed (an upper bound, not a sync)
        gate.open(len(pids))
        assert _passed(report_read, 2, timeout=30) == 2
    finally:
        for pid in pids:
            os.waitpid(pid, 0)
        os.close(report_read)
        os.close(report_write)


def test_a_gate_the_kernel_never_opens_lets_them_through_once_its_ends_are_closed():
    """A kernel that dies before opening the gate: its ends close, the ranks read the pipe's end and
    go on (to find their kernel gone)."""
    report_read, report_write = os.pipe()
    gate = StartGate()
    pids = [_fork_through(gate, report_write) for _ in range(2)]
    try:
        gate.open(0)  # nothing written: only the ends closed, as at the kernel's death
        assert _passed(report_read, 2, timeout=30) == 2
    finally:
        for pid in pids:
            os.waitpid(pid, 0)
        os.close(report_read)
        os.close(report_write)


def test_in_a_kernel_no_forked_rank_starts_before_the_last_fork_returned(kernel):
    """Each rank's function starts after the kernel's last fork of the launch returned, so the forks
    run without a rank starting (or exiting) beside them."""
    kernel.ok(
        dedent("""
        import time
        from notebook_launcher.starters import fork as fork_module
        FORKED_AT = []
        _start = fork_module.ForkStarter.start
        def _timed_start(self, plan, specs, pipes):
            process = _start(self, plan, specs, pipes)
            FORKED_AT.append(time.monotonic())
            return process
        fork_module.ForkStarter.start = _timed_start
        def started_at():
            return time.monotonic()
    """)
    )
    try:
        for _ in range(3):
            kernel.ok("FORKED_AT.clear()")
            kernel.ok("job = launch(started_at, num_processes=2, start_method='fork', display='none'); job.wait()")
            forked, started = kernel.eval("FORKED_AT"), kernel.eval("job.results")
            assert len(forked) == 2 and min(started) > max(forked), (forked, started)
    finally:
        kernel.ok("fork_module.ForkStarter.start = _start")
