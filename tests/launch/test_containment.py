"""Nothing outlives a launch: whatever way a rank or the kernel ends, the processes the ranks started
end too, and they start with the default signal state (``p.terminate()`` in user code works).

Leftovers are counted by walking process trees and by the pids the ranks wrote down, never by sleeps:
every wait is an upper bound on ``psutil.wait_procs``.
"""

from __future__ import annotations

import os
import signal
import time
from textwrap import dedent

import psutil
import pytest
from kernel_session import KernelSession

from notebook_launcher.backends.local.guardian import GUARDIAN_MARK

STARTS_A_CHILD = dedent("""
    import subprocess, ctypes
    def starts_a_child(ending):
        child = subprocess.Popen(["sleep", "300"])
        with open(os.environ["PIDS_FILE"] + os.environ["RANK"], "w") as file:
            file.write(str(child.pid))
        import torch.distributed as dist
        dist.init_process_group("gloo")
        dist.barrier()                         # both children are running
        if os.environ["RANK"] != "0":
            threading.Event().wait()           # ended by the kernel once rank 0 has gone
        if ending == "os._exit":
            os._exit(3)
        if ending == "segfault":
            ctypes.string_at(0)
        if ending == "SIGKILL":
            os.kill(os.getpid(), signal.SIGKILL)
        threading.Event().wait()
""")


def _pids(tmp_path, ranks):
    return [int((tmp_path / f"pids{rank}").read_text()) for rank in ranks]


def _alive(pids):
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def _wait_gone(pids, timeout):
    processes = []
    for pid in pids:
        try:
            processes.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(processes, timeout=timeout)
    return _alive(pids)


@pytest.mark.parametrize("method", ["fork", "spawn"])
@pytest.mark.parametrize("ending", ["os._exit", "segfault", "SIGKILL"])
def test_a_rank_that_dies_takes_the_processes_it_started_along(kernel, tmp_path, method, ending):
    kernel.ok(STARTS_A_CHILD)
    kernel.ok(f"os.environ['PIDS_FILE'] = {str(tmp_path / 'pids')!r}")
    result = kernel.run(
        f"notebook_launcher(starts_a_child, ({ending!r},), num_processes=2, start_method={method!r}, display='none')"
    )
    kernel.ok("del os.environ['PIDS_FILE']")
    assert result.error["ename"] == "WorkerError"
    assert _wait_gone(_pids(tmp_path, [0, 1]), timeout=5) == []  # the SIGKILL is sent before the cell returns


WAITS_WITH_A_CHILD = dedent("""
    import subprocess
    def waits_with_a_child():
        child = subprocess.Popen(["sleep", "300"])
        with open(os.environ["PIDS_FILE"] + os.environ["RANK"], "w") as file:
            file.write(str(child.pid))
        threading.Event().wait()
""")


def _start_and_wait_for_children(session, tmp_path, method):
    session.ok("import os, threading\nfrom notebook_launcher import launch")
    session.ok(WAITS_WITH_A_CHILD)
    session.ok(f"os.environ['PIDS_FILE'] = {str(tmp_path / 'pids')!r}")
    session.ok(f"job = launch(waits_with_a_child, num_processes=2, start_method={method!r}, display='none')")
    session.ok(
        "import time\n_t = time.monotonic()\n"
        f"while not all(os.path.exists({str(tmp_path / 'pids')!r} + str(r)) for r in (0, 1)):\n"
        "    assert time.monotonic() - _t < 60\n"
        "    job.join(0.05)\n"
    )
    family = [process.pid for process in session.process.children(recursive=True)]
    return family + _pids(tmp_path, [0, 1])


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_killed_kernel_takes_every_rank_and_every_process_they_started(tmp_path, method):
    """A kernel killed for memory (SIGKILL: nothing runs in it) leaves nothing behind."""
    session = KernelSession()
    try:
        pids = _start_and_wait_for_children(session, tmp_path, method)
        session.process.send_signal(signal.SIGKILL)
        assert _wait_gone(pids, timeout=10) == []
    finally:
        session.shutdown()


def test_a_kernel_restart_with_a_background_launch_leaves_nothing(tmp_path):
    session = KernelSession()
    try:
        pids = _start_and_wait_for_children(session, tmp_path, "spawn")
        session.manager.restart_kernel(now=True)
        assert _wait_gone(pids, timeout=10) == []
    finally:
        session.shutdown()


SIGNALS_OF_A_CHILD = dedent("""
    import subprocess
    def signals_of_a_child():
        child = subprocess.Popen(["sleep", "300"])
        lines = open(f"/proc/{child.pid}/status").read().splitlines()
        status = dict(line.split(":\\t") for line in lines if "\\t" in line)
        child.terminate()
        code = child.wait(timeout=30)
        return int(status["SigBlk"], 16), int(status["SigIgn"], 16), code
""")


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_processes_a_rank_starts_have_the_default_signal_state(kernel, method):
    """As a process the kernel itself starts: nothing blocked, nothing ignored that the kernel's own
    children do not ignore (a shell that started the kernel in the background ignores SIGQUIT)."""
    kernel.ok(SIGNALS_OF_A_CHILD)
    blocked, ignored, code = kernel.eval(
        f"notebook_launcher(signals_of_a_child, num_processes=1, start_method={method!r}, display='none')"
    )
    baseline = kernel.eval("signals_of_a_child()")  # a child of the kernel, no rank in between
    assert blocked == 0 and (blocked, ignored) == baseline[:2]
    assert not ignored & (1 << (signal.SIGINT - 1)) and not blocked & (1 << (signal.SIGTERM - 1))
    assert code == -signal.SIGTERM  # terminate() ended it


FAILS_WITH_A_CHILD = dedent("""
    import subprocess
    def fails_with_a_child():
        import torch.distributed as dist
        subprocess.Popen(["sleep", "300"])
        dist.init_process_group("gloo")
        dist.barrier()
        if dist.get_rank() == 1:
            raise ValueError("failed with a child running")
        dist.barrier()
""")


def test_a_failing_rank_with_a_child_reports_without_waiting_out_grace_periods(kernel):
    kernel.ok(FAILS_WITH_A_CHILD)
    kernel.ok("notebook_launcher(lambda: 0, num_processes=2, display='none')")  # warm
    result = kernel.run(
        "t0 = time.monotonic()\n"
        "try:\n"
        "    notebook_launcher(fails_with_a_child, num_processes=2, display='none')\n"
        "finally:\n"
        "    took = time.monotonic() - t0"
    )
    assert result.error["evalue"] == "[rank 1] failed with a child running"
    # the siblings' children end on the first SIGTERM: no grace period (2 s) is waited out
    assert kernel.eval("took") < 2.0


def test_what_a_killed_kernel_left_in_tmp_is_removed_by_the_next_import(tmp_path):
    """The workers' directory of a kernel killed mid-launch is named after its pid; the next kernel
    that imports the package removes it. (The spawn payload has no name to leave: an anonymous file;
    the ranks' compile cache is removed by the guardian.) The kernels get a temporary folder of
    their own, so no other test's kernel sweeps it meanwhile."""
    import glob
    import shutil
    import tempfile

    scratch = tempfile.mkdtemp(prefix="nlt-", dir="/tmp")  # short: the workers' socket path is in it
    session = KernelSession(env={"TMPDIR": scratch})
    try:
        _start_and_wait_for_children(session, tmp_path, "spawn")
        session.ok("from notebook_launcher import start_workers\nworkers = start_workers(1, display='none')")
        pid = session.process.pid
        found = glob.glob(f"{scratch}/notebook-launcher-*{pid}-*")
        left = [path for path in found if "-workers-" in path]
        compiled = [path for path in found if "-compile-" in path]
        assert not any(path.endswith(".pkl") for path in found) and left and compiled, found
        family = session.process.children(recursive=True)
        session.process.send_signal(signal.SIGKILL)
        psutil.wait_procs(family, timeout=10)
    finally:
        session.shutdown()
    assert all(os.path.exists(path) for path in left)  # nobody was there to remove them
    assert not any(os.path.exists(path) for path in compiled)  # but the guardian, the compile cache
    fresh = KernelSession(env={"TMPDIR": scratch})
    try:
        fresh.ok("import notebook_launcher")
        assert [path for path in left if os.path.exists(path)] == []
    finally:
        fresh.shutdown()
        shutil.rmtree(scratch, ignore_errors=True)


STARTS_ESCAPEES = dedent("""
    import subprocess, sys
    def starts_escapees(ending):
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        pids = [
            subprocess.Popen(["sleep", "300"], start_new_session=True, **quiet).pid,
            subprocess.Popen(["sleep", "300"], preexec_fn=os.setpgrp, **quiet).pid,  # process_group=0 before 3.11
            subprocess.Popen(["setsid", "sleep", "300"], **quiet).pid,
        ]
        if sys.version_info >= (3, 11):
            pids.append(subprocess.Popen(["sleep", "300"], process_group=0, **quiet).pid)
        for script in ("sleep 300 >/dev/null 2>&1 & echo $!",            # job control (or none, without a terminal)
                       "(setsid sleep 300 >/dev/null 2>&1 & echo $!)",   # a daemon: its parent is gone at once
                       "nohup setsid sleep 300 >/dev/null 2>&1 & echo $!"):
            done = subprocess.run(["bash", "-mc", script], capture_output=True, text=True, timeout=30)
            pids.append(int(done.stdout.split()[-1]))
        with open(os.environ["PIDS_FILE"] + os.environ["RANK"], "w") as file:
            file.write(" ".join(map(str, pids)))
        if ending == "SIGKILL":
            os.kill(os.getpid(), signal.SIGKILL)
        threading.Event().wait()
""")


def _escapees(tmp_path, rank=0):
    return [int(pid) for pid in (tmp_path / f"pids{rank}").read_text().split()]


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_processes_that_left_the_ranks_group_die_with_a_killed_rank(kernel, tmp_path, method):
    """Seven ways out of the rank's process group (a new session, a new group, ``setsid``, a shell's
    background job, a daemon, ``nohup``): before, every one outlived a SIGKILLed rank with ppid 1."""
    kernel.ok("import os, signal, threading")
    kernel.ok(STARTS_ESCAPEES)
    kernel.ok(f"os.environ['PIDS_FILE'] = {str(tmp_path / 'pids')!r}")
    result = kernel.run(f"notebook_launcher(starts_escapees, ('SIGKILL',), num_processes=1, start_method={method!r})")
    kernel.ok("del os.environ['PIDS_FILE']")
    assert result.error["ename"] == "WorkerError"
    pids = _escapees(tmp_path)
    assert len(pids) >= 6
    assert _wait_gone(pids, timeout=5) == []  # SIGKILLed before the cell returned


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_processes_that_left_the_ranks_group_die_with_a_killed_kernel(tmp_path, method):
    session = KernelSession()
    try:
        session.ok("import os, signal, threading\nfrom notebook_launcher import launch")
        session.ok(STARTS_ESCAPEES)
        session.ok(f"os.environ['PIDS_FILE'] = {str(tmp_path / 'pids')!r}")
        session.ok(
            f"job = launch(starts_escapees, ('wait',), num_processes=1, start_method={method!r}, display='none')"
        )
        session.ok(
            "import time\n_t = time.monotonic()\n"
            f"while not os.path.exists({str(tmp_path / 'pids0')!r}):\n"
            "    assert time.monotonic() - _t < 60\n"
            "    job.join(0.05)\n"
        )
        pids = _escapees(tmp_path)
        session.process.send_signal(signal.SIGKILL)
        assert _wait_gone(pids, timeout=10) == []
    finally:
        session.shutdown()


def test_a_guardian_killed_by_hand_is_replaced_by_one_that_knows_every_live_group(tmp_path):
    """Before, the new guardian was told only of the group whose start made it, so the processes of
    launches started earlier outlived a killed kernel."""
    session = KernelSession()
    try:
        pids = _start_and_wait_for_children(session, tmp_path, "fork")
        guardians = [p for p in session.process.children() if GUARDIAN_MARK in " ".join(p.cmdline())]
        assert len(guardians) == 1
        guardians[0].kill()
        deadline = time.monotonic() + 10
        while guardians[0].status() != psutil.STATUS_ZOMBIE:  # the kernel does not reap it
            assert time.monotonic() < deadline
            time.sleep(0.01)
        session.ok(
            "second = launch(lambda: threading.Event().wait(), num_processes=1, display='none')\n"
            "_t = time.monotonic()\n"
            "while second.rank_status(0) != 'running':  # its group is told to the guardian before it runs\n"
            "    assert time.monotonic() - _t < 60\n"
            "    second.join(0.05)\n"
        )
        assert [p for p in session.process.children() if GUARDIAN_MARK in " ".join(p.cmdline())]
        family = [process.pid for process in session.process.children(recursive=True)]
        session.process.send_signal(signal.SIGKILL)
        assert _wait_gone(pids + family, timeout=10) == []
    finally:
        session.shutdown()


STARTS_UNMARKED = dedent("""
    import ctypes, subprocess, sys, time
    def starts_unmarked(ending):
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        pids = [subprocess.Popen(["sleep", "300"], env={}, **quiet).pid]     # no environment: no mark
        retitled = (
            "import ctypes, os, sys, time\\n"
            "fields = open('/proc/self/stat').read().rsplit(')', 1)[1].split()\\n"
            "start, end = int(fields[-5]), int(fields[-2])        # arg_start, env_end\\n"
            "ctypes.memset(start, 0, end - start)                  # its title over argv and environ\\n"
            "os.write(1, b'retitled')\\n"
            "time.sleep(300)\\n"
        )
        child = subprocess.Popen([sys.executable, "-c", retitled], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert child.stdout.read(8) == b"retitled"
        pids.append(child.pid)
        read_end, write_end = os.pipe()
        if os.fork() == 0:                       # a daemon, the python-daemon way: no new program
            os.setsid()
            if os.fork() == 0:
                os.write(write_end, str(os.getpid()).encode())
                time.sleep(300)
            os._exit(0)
        os.close(write_end)
        pids.append(int(os.read(read_end, 32)))
        with open(os.environ["PIDS_FILE"] + os.environ["RANK"], "w") as file:
            file.write(" ".join(map(str, pids)))
        if ending == "SIGKILL":
            os.kill(os.getpid(), signal.SIGKILL)
        threading.Event().wait()
""")


def _unmarked_are_unmarked(pids):
    """The three carry no mark (so only their cgroup can find them) and have left the rank's group."""
    from notebook_launcher.rank.marked import MARK_VARIABLE

    for pid in pids:
        with open(f"/proc/{pid}/environ", "rb") as file:
            assert MARK_VARIABLE.encode() not in file.read()


needs_cgroups = pytest.mark.skipif(
    not __import__("notebook_launcher.rank.containers", fromlist=["available"]).available(),
    reason="no writable cgroup v2 hierarchy here: processes that leave group, session and mark cannot be contained",
)


@needs_cgroups
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_processes_that_carry_no_mark_die_with_a_killed_rank(kernel, tmp_path, method):
    """A daemon made without a new program, a child started with ``env={}`` and one that overwrote
    its environment to set its title: before, each outlived a SIGKILLed rank with ppid 1."""
    kernel.ok("import os, signal, threading")
    kernel.ok(STARTS_UNMARKED)
    kernel.ok(f"os.environ['PIDS_FILE'] = {str(tmp_path / 'pids')!r}")
    result = kernel.run(f"notebook_launcher(starts_unmarked, ('SIGKILL',), num_processes=1, start_method={method!r})")
    kernel.ok("del os.environ['PIDS_FILE']")
    assert result.error["ename"] == "WorkerError"
    pids = _escapees(tmp_path)
    assert len(pids) == 3
    assert _wait_gone(pids, timeout=5) == []  # SIGKILLed before the cell returned


@needs_cgroups
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_processes_that_carry_no_mark_die_with_a_killed_kernel(tmp_path, method):
    from notebook_launcher.rank import containers

    session = KernelSession()
    try:
        session.ok("import os, signal, threading\nfrom notebook_launcher import launch")
        session.ok(STARTS_UNMARKED)
        session.ok(f"os.environ['PIDS_FILE'] = {str(tmp_path / 'pids')!r}")
        session.ok(
            f"job = launch(starts_unmarked, ('wait',), num_processes=1, start_method={method!r}, display='none')"
        )
        session.ok(
            "import time\n_t = time.monotonic()\n"
            f"while not os.path.exists({str(tmp_path / 'pids0')!r}):\n"
            "    assert time.monotonic() - _t < 60\n"
            "    job.join(0.05)\n"
        )
        pids = _escapees(tmp_path)
        _unmarked_are_unmarked(pids)
        root = containers.kernel_root(session.process.pid, create=False)
        assert root is not None and set(pids) <= set(containers.members(root))
        session.process.send_signal(signal.SIGKILL)
        assert _wait_gone(pids, timeout=10) == []
        deadline = time.monotonic() + 10
        while os.path.exists(root):  # the guardian removes the kernel's cgroups after emptying them
            assert time.monotonic() < deadline, f"{root} was left"
            time.sleep(0.05)
    finally:
        session.shutdown()
