"""Forked ranks done before the last fork wait to exit until it (``starters.exit_gate``): with real
forks, and in a real kernel, where rank 0 still runs before rank 1 is forked."""

import os
import signal
import sys
from textwrap import dedent

import pytest

from notebook_launcher.starters.exit_gate import ExitGate
from notebook_launcher.starters.forked_process import fork_process

HELD = 0.5  # seconds an unheld forked process gets to end: an upper bound on its exit, not a sync


def _returns(code):
    return code


def _exits(code):
    sys.exit(code)


def _forked(gate, *targets):
    return [fork_process(target, args, gate) for target, args in targets]


def _release(gate, processes):
    gate.open(0)  # idempotent: a test that failed before opening it must not leave them waiting
    for process in processes:
        process.release()


def test_forked_processes_done_early_exit_only_once_the_gate_opens_with_their_own_codes():
    gate = ExitGate()
    processes = _forked(gate, (_returns, (0,)), (_returns, (3,)), (_exits, (4,)))
    try:
        assert [process.wait(timeout=HELD) for process in processes] == [None, None, None]
        gate.open(len(processes))
        assert [process.wait(timeout=30) for process in processes] == [0, 3, 4]
    finally:
        _release(gate, processes)


def test_a_gate_the_kernel_never_opened_lets_them_exit_once_its_ends_close():
    """A kernel that writes nothing (more ranks than bytes, or gone): the end of the pipe lets them out."""
    gate = ExitGate()
    processes = _forked(gate, (_returns, (0,)), (_returns, (5,)))
    try:
        assert processes[0].wait(timeout=HELD) is None
        gate.open(0)
        assert [process.wait(timeout=30) for process in processes] == [0, 5]
    finally:
        _release(gate, processes)


def test_a_process_interrupted_at_the_gate_exits_with_the_code_it_had():
    gate = ExitGate()
    processes = _forked(gate, (_returns, (6,)))
    try:
        assert processes[0].wait(timeout=HELD) is None
        os.kill(processes[0].pid, signal.SIGINT)
        assert processes[0].wait(timeout=30) == 6
    finally:
        _release(gate, processes)


def test_opening_twice_is_harmless_and_writes_nothing_more():
    gate = ExitGate()
    gate.open(1)
    gate.open(2)  # the rank group's close opens it again, whatever ended the attempt
    with pytest.raises(OSError):
        os.fstat(gate._write)


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="watches rank 0's end through a pidfd (Linux)")
def test_in_a_kernel_rank_0_runs_before_rank_1_is_forked_and_exits_after_it(kernel):
    """The start order users' code may rely on is kept (rank 0's function runs while rank 1 is being
    forked, as under ``torch.multiprocessing``), and only rank 0's exit waits for the last fork."""
    kernel.ok(
        dedent("""
        import select
        from notebook_launcher.starters import fork as fork_module
        RAN_READ, RAN_WRITE = os.pipe()
        SEEN = {}
        _start = fork_module.ForkStarter.start

        def _ended_within(pid, seconds):
            watch = os.pidfd_open(pid)
            try:
                return bool(select.select([watch], [], [], seconds)[0])
            finally:
                os.close(watch)

        def _watched_start(self, plan, specs, pipes):
            if specs[0].rank == 1:
                SEEN["rank 0 ran before rank 1 was forked"] = bool(select.select([RAN_READ], [], [], 30)[0])
                SEEN["rank 0 ended before rank 1 was forked"] = _ended_within(SEEN["rank 0"], %r)
            process = _start(self, plan, specs, pipes)
            SEEN["rank %%d" %% specs[0].rank] = process.pid
            return process

        fork_module.ForkStarter.start = _watched_start

        def note_and_return_rank():
            if os.environ["RANK"] == "0":
                os.write(RAN_WRITE, b"r")
            return int(os.environ["RANK"])
    """)
        % HELD
    )
    try:
        kernel.ok("job = launch(note_and_return_rank, num_processes=2, start_method='fork', display='none'); job.wait()")
        assert kernel.eval("job.results") == [0, 1]
        seen = kernel.eval("SEEN")
        assert seen["rank 0 ran before rank 1 was forked"] is True
        assert seen["rank 0 ended before rank 1 was forked"] is False
    finally:
        kernel.ok("fork_module.ForkStarter.start = _start")
