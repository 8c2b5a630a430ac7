"""Spawn-path ranks forked from the kernel's warm start server: the rank sees the kernel as it is
at launch time, the server is never a device user, and no process outlives what it belongs to."""

from __future__ import annotations

import signal
from textwrap import dedent

import psutil
from gates import gate_code, open_gates
from kernel_session import KernelSession, is_start_server

PROBE = dedent("""
    import os, sys
    from notebook_launcher.backends.local.server import start_server_info, shutdown_start_server
    def probe():
        import torch
        return os.getppid(), os.environ.get("PROBE_VALUE"), os.getcwd(), torch.cuda.is_initialized()
""")


WAITS = "def waits():\n    import time\n    wait_at_gate()\n    time.sleep(300)"


def test_spawn_ranks_are_forked_from_the_server_and_see_the_kernel_as_it_is_now(kernel, tmp_path):
    kernel.ok(PROBE)
    kernel.ok("notebook_launcher(probe, num_processes=2, start_method='spawn', display='none')")
    server = kernel.eval("start_server_info()")
    assert server["state"] == "warm" and server["cuda_initialized"] is False
    assert {"torch", "torch.distributed", "torch._dynamo"} <= set(server["preloaded"])
    # changed after the server started: the environment, the working directory, sys.path
    (tmp_path / "late_module.py").write_text("VALUE = 'importable'\n")
    kernel.ok(
        f"os.environ['PROBE_VALUE'] = 'set later'; os.chdir({str(tmp_path)!r}); sys.path.append({str(tmp_path)!r})"
    )
    kernel.ok(
        dedent("""
        class Point:                                   # a class defined in a cell, by value
            def __init__(self, x): self.x = x
        def uses_late_module(point):
            import late_module
            return late_module.VALUE, point.x, type(point).__name__
    """)
    )
    try:
        results = kernel.eval("notebook_launcher(probe, num_processes=2, start_method='spawn', display='none')")
        late = kernel.eval(
            "notebook_launcher(uses_late_module, (Point(3),), num_processes=1, start_method='spawn', display='none')"
        )
    finally:
        kernel.ok("del os.environ['PROBE_VALUE']; os.chdir(os.path.expanduser('~')); sys.path.remove(sys.path[-1])")
    assert results == (server["pid"], "set later", str(tmp_path), False)
    assert late == ("importable", 3, "Point")
    assert kernel.eval("start_server_info()['pid']") == server["pid"]  # the same warm server
    assert kernel.eval("start_server_info()['ranks_started']") == server["ranks_started"] + 3


def test_a_rank_killed_by_a_signal_reports_it_and_the_server_stays(kernel):
    kernel.ok(PROBE)
    kernel.ok("def killed():\n    os.kill(os.getpid(), signal.SIGKILL)")
    result = kernel.run("notebook_launcher(killed, num_processes=1, start_method='spawn', display='none')")
    assert result.error["ename"] == "WorkerError" and "SIGKILL" in result.error["evalue"]
    assert kernel.eval("start_server_info()['state']") == "warm"


def test_an_import_time_variable_change_starts_a_new_server(kernel):
    kernel.ok(PROBE)
    kernel.ok("notebook_launcher(probe, num_processes=1, start_method='spawn', display='none')")
    first = kernel.eval("start_server_info()['pid']")
    kernel.ok("os.environ['OMP_SCHEDULE'] = 'static'")
    try:
        kernel.ok("notebook_launcher(probe, num_processes=1, start_method='spawn', display='none')")
        second = kernel.eval("start_server_info()['pid']")
    finally:
        kernel.ok("del os.environ['OMP_SCHEDULE']")
    assert second != first
    assert not psutil.pid_exists(first)  # retired at once: none of its ranks was running


def test_a_dead_server_is_a_clear_error_once_and_the_next_launch_gets_a_new_one(kernel, tmp_path):
    kernel.ok(PROBE)
    kernel.ok(gate_code(tmp_path))
    kernel.ok("notebook_launcher(probe, num_processes=1, start_method='spawn', display='none')")
    pid = kernel.eval("start_server_info()['pid']")
    kernel.ok(WAITS)
    kernel.ok("job = launch(waits, num_processes=2, start_method='spawn', display='none')")
    open_gates(tmp_path, [0, 1])
    psutil.Process(pid).kill()  # its ranks die with it (PDEATHSIG)
    failed = kernel.run("job.wait(timeout=30)", timeout=60)
    assert failed.error["ename"] == "WorkerError"
    # before: "rank 0 was killed by signal SIGKILL (it may have run out of memory)"
    assert f"was lost: its start server (pid {pid}) was killed by signal SIGKILL" in failed.error["evalue"]
    assert "out of memory" not in failed.error["evalue"]
    kernel.ok("notebook_launcher(probe, num_processes=1, start_method='spawn', display='none')")
    assert kernel.eval("start_server_info()['pid']") != pid


def test_a_server_killed_while_it_starts_says_so_at_once(kernel):
    """Before: "the spawn start server (pid N) exited to start"."""
    kernel.ok("from notebook_launcher.backends.local.server import shutdown_start_server\nshutdown_start_server()")
    result = kernel.run(
        dedent("""
        import threading, psutil, time
        def kill_the_server():
            while True:  # bounded by the launch: the server appears within its first seconds
                for child in psutil.Process().children():
                    if "notebook_launcher.rank.start_server" in " ".join(child.cmdline()):
                        child.kill()
                        return
                time.sleep(0.005)
        threading.Thread(target=kill_the_server, daemon=True).start()
        t0 = time.monotonic()
        try:
            notebook_launcher(probe, num_processes=1, start_method='spawn', display='none')
        finally:
            took = time.monotonic() - t0
    """),
        timeout=120,
    )
    assert result.error["ename"] == "LaunchError"
    assert "was killed by signal SIGKILL while starting" in result.error["evalue"]
    assert kernel.eval("took") < 30
    kernel.ok("notebook_launcher(probe, num_processes=1, start_method='spawn', display='none')")  # a new one


def test_with_the_server_off_ranks_are_fresh_interpreters(kernel):
    kernel.ok(PROBE)
    kernel.ok("os.environ['NOTEBOOK_LAUNCHER_START_SERVER'] = 'off'")
    try:
        parent = kernel.eval("notebook_launcher(probe, num_processes=1, start_method='spawn', display='none')[0]")
    finally:
        kernel.ok("del os.environ['NOTEBOOK_LAUNCHER_START_SERVER']")
    assert parent == kernel.process.pid


def test_the_server_ends_with_its_kernel_and_takes_its_ranks_along(tmp_path):
    session = KernelSession()
    try:
        session.ok("import os, sys\nfrom notebook_launcher import launch")
        session.ok("from notebook_launcher.backends.local.server import start_server_info")
        session.ok(gate_code(tmp_path))
        session.ok(WAITS)
        session.ok("job = launch(waits, num_processes=2, start_method='spawn', display='none')")
        open_gates(tmp_path, [0, 1])
        server = psutil.Process(session.eval("start_server_info()['pid']"))
        family = [server, *server.children(recursive=True)]
        assert is_start_server(server) and len(family) == 3
        session.process.send_signal(signal.SIGKILL)  # the kernel dies without cleaning up
        _, alive = psutil.wait_procs(family, timeout=30)
        assert alive == []
    finally:
        session.shutdown()


def test_shutting_the_server_down_ends_it(kernel):
    kernel.ok(PROBE)
    kernel.ok("notebook_launcher(probe, num_processes=1, start_method='spawn', display='none')")
    pid = kernel.eval("start_server_info()['pid']")
    kernel.ok("shutdown_start_server()")
    assert kernel.eval("start_server_info()['state']") == "not started" and not psutil.pid_exists(pid)
