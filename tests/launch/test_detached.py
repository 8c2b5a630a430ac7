"""Launches that outlive their kernel (``launch(..., detach=True)``): a real host process, real
kernels restarted and attached, real ranks. Each test ends the host it started (by the pid the
host wrote), should the launch not end it."""

from __future__ import annotations

import json
import os
import signal
import stat
from textwrap import dedent

import psutil
import pytest
from gates import gate_code, open_gates
from kernel_session import KernelSession


@pytest.fixture
def detached_dir(tmp_path, monkeypatch):
    folder = tmp_path / "detached"
    monkeypatch.setenv("NOTEBOOK_LAUNCHER_DETACHED_DIR", str(folder))
    yield folder
    for host in folder.glob("*/host.json"):  # end what a failed test left running: only our hosts
        pid = json.loads(host.read_text())["pid"]
        try:
            process = psutil.Process(pid)
            if "notebook_launcher.detached.host" in " ".join(process.cmdline()):
                process.kill()
        except psutil.Error:
            pass


@pytest.fixture
def in_kernel(kernel, detached_dir):
    """The module's kernel, its detached launches kept in ``detached_dir``."""
    kernel.ok(f"os.environ['NOTEBOOK_LAUNCHER_DETACHED_DIR'] = {str(detached_dir)!r}")
    return kernel


def host_process(folder):
    (host,) = folder.glob("*/host.json")
    return psutil.Process(json.loads(host.read_text())["pid"])


def wait_in_kernel(kernel, condition, seconds=60):
    """Run a loop in the kernel until ``condition`` (an expression) holds, ``seconds`` at most."""
    kernel.ok(
        f"_t0 = time.monotonic()\nwhile not ({condition}):\n    assert time.monotonic() - _t0 < {seconds}\n"
        "    job.join(0.05)"
    )


def started_kernel(directory):
    session = KernelSession(env={"NOTEBOOK_LAUNCHER_DETACHED_DIR": str(directory)})
    session.ok("import os, time\nfrom notebook_launcher import launch, attach, detached_launches")
    return session


def test_a_detached_launch_outlives_its_kernel_and_a_new_kernel_attaches(detached_dir, tmp_path):
    first = started_kernel(detached_dir)
    try:
        first.ok(gate_code(tmp_path))
        first.ok(
            dedent("""
            def train():
                import torch.distributed as dist
                dist.init_process_group("gloo")
                print("before the restart", flush=True)
                wait_at_gate()
                print("after the restart", flush=True)
                return (42, os.getpid())
            job = launch(train, num_processes=2, display="none", detach=True)
        """)
        )
        wait_in_kernel(first, "'before the restart' in job.logs(1)")
    finally:
        first.shutdown()  # the kernel's process group is killed, as a restart does
    host = host_process(detached_dir)
    assert host.is_running() and host.status() != psutil.STATUS_ZOMBIE
    second = started_kernel(detached_dir)
    try:
        attached = second.ok("job = attach(display='text')")  # the view resumes from the first line
        assert "[rank 1] before the restart" in attached.stdout
        open_gates(tmp_path, [0, 1])
        second.ok("value = job.wait(timeout=120)")
        assert second.eval("(value[0], job.status, job.logs(1))") == (
            42,
            "succeeded",
            "before the restart\nafter the restart\n",
        )
        rank_pid = second.eval("value[1]")
        assert psutil.wait_procs([host], timeout=60)[1] == []  # the host ends with its launch
        assert not psutil.pid_exists(rank_pid)
        assert second.eval("[(found.status, found.function) for found in detached_launches()]") == [
            ("succeeded", "train")
        ]
    finally:
        second.shutdown()


def test_a_failing_rank_is_raised_in_the_attached_kernel_with_its_frames(in_kernel, detached_dir):
    kernel = in_kernel
    kernel.ok(
        dedent("""
        from notebook_launcher import attach
        def broken():
            raise ValueError("bad batch")
        launched = launch(broken, num_processes=2, display="none", detach=True)
        job = attach(launched.id)
    """)
    )
    result = kernel.run("job.wait(timeout=120)")
    assert result.error["ename"] == "ValueError" and "bad batch" in result.error["evalue"]
    assert kernel.eval("job.status") == "failed"
    notes = kernel.eval("'\\n'.join(job.exception.__notes__)")
    assert ", in broken" in notes and 'raise ValueError("bad batch")' in notes  # the cell's line


def test_stop_ends_a_detached_launch_and_everything_it_started(in_kernel, detached_dir, tmp_path):
    kernel = in_kernel
    pids = tmp_path / "pids"
    pids.mkdir()
    kernel.ok(
        dedent(f"""
        def forever():
            open(os.path.join({str(pids)!r}, str(os.getpid())), "w").close()
            print("waiting", flush=True)
            threading.Event().wait()
        job = launch(forever, num_processes=2, display="none", detach=True)
    """)
    )
    wait_in_kernel(kernel, "'waiting' in job.logs(0) and 'waiting' in job.logs(1)")
    host = host_process(detached_dir)
    ranks = [psutil.Process(int(path.name)) for path in pids.iterdir()]
    assert kernel.eval("job.stop(timeout=60)") is True
    assert kernel.eval("job.status") == "stopped"
    result = kernel.run("job.wait()")
    assert result.error["ename"] == "LaunchError" and "stopped by DetachedLaunch.stop()" in result.error["evalue"]
    assert psutil.wait_procs([host, *ranks], timeout=60)[1] == []


def test_sigkill_of_the_host_and_its_guardian_leaves_nothing_and_the_launch_reads_lost(
    in_kernel, detached_dir, tmp_path
):
    """Everything of the launch's machine side killed at once: the ranks end with their host (the
    parent-death signal), and what a rank started in a session of its own, which only the killed
    guardian would have ended, is ended by the kernel that finds the host lost. Without rank
    cgroups (NOTEBOOK_LAUNCHER_CGROUPS=off, as where none is writable), by the mark it carries."""
    kernel = in_kernel
    pids = tmp_path / "pids"
    pids.mkdir()
    kernel.ok(
        dedent(f"""
        import subprocess
        os.environ["NOTEBOOK_LAUNCHER_CGROUPS"] = "off"  # the host's, from this kernel's
        def forever():
            open(os.path.join({str(pids)!r}, str(os.getpid())), "w").close()
            escaped = subprocess.Popen(["sleep", "600"], start_new_session=True)
            open(os.path.join({str(pids)!r}, str(escaped.pid)), "w").close()
            print("waiting", flush=True)
            threading.Event().wait()
        job = launch(forever, num_processes=2, display="none", detach=True)
        del os.environ["NOTEBOOK_LAUNCHER_CGROUPS"]
    """)
    )
    wait_in_kernel(kernel, "'waiting' in job.logs(0) and 'waiting' in job.logs(1)")
    host = host_process(detached_dir)
    started = [psutil.Process(int(path.name)) for path in pids.iterdir()]
    assert len(started) == 4  # two ranks, and a process each started in a session of its own
    guardians = [child for child in host.children() if "notebook-launcher-guardian" in " ".join(child.cmdline())]
    assert guardians
    for process in (*guardians, host):  # the guardian first: it cannot act on the host's death
        process.send_signal(signal.SIGKILL)
    result = kernel.run("job.wait(timeout=60)")
    assert result.error["ename"] == "LaunchError" and "ended without an end" in result.error["evalue"]
    assert psutil.wait_procs([host, *guardians, *started], timeout=60)[1] == []
    assert "2 process(es) its ranks had started were ended" in kernel.eval("' '.join(job.exception.__notes__)")
    assert kernel.eval("[found.status for found in __import__('notebook_launcher').detached_launches()]") == ["lost"]


def test_two_detached_launches_run_side_by_side_and_are_listed(in_kernel, detached_dir):
    kernel = in_kernel
    kernel.ok(
        dedent("""
        from notebook_launcher import attach, detached_launches
        first = launch(lambda: "first", num_processes=1, display="none", detach=True)
        second = launch(lambda: "second", num_processes=2, display="none", detach=True)
        values = (first.wait(timeout=120), second.wait(timeout=120))
    """)
    )
    assert kernel.eval("values") == ("first", "second")
    assert kernel.eval("[(found.id, found.status) for found in detached_launches()]") == [
        (kernel.eval("first.id"), "succeeded"),
        (kernel.eval("second.id"), "succeeded"),
    ]
    assert kernel.eval("attach(first.id, display='none').wait(timeout=60)") == "first"
    kernel.ok("first.forget()")
    assert kernel.eval("[found.id for found in detached_launches()]") == [kernel.eval("second.id")]


def test_an_interrupt_leaves_the_detached_launch_running_and_its_files_are_private(in_kernel, detached_dir):
    kernel = in_kernel
    kernel.ok(
        dedent("""
        def forever():
            print("waiting", flush=True)
            threading.Event().wait()
        job = launch(forever, num_processes=1, display="none", detach=True)
    """)
    )
    wait_in_kernel(kernel, "'waiting' in job.logs(0)")
    kernel.ok(
        "def announce():\n    while not job.waited_on:\n        time.sleep(0.01)\n    print('waiting in the cell')"
    )
    waiting = kernel.submit("threading.Thread(target=announce).start(); job.wait()")
    kernel.collect(waiting, timeout=30, until=lambda result: "waiting in the cell" in result.stdout)
    kernel.interrupt()
    result = kernel.collect(waiting)
    assert result.error["ename"] == "KeyboardInterrupt" and "it goes on" in result.error["evalue"]
    assert kernel.eval("job.status") == "running"
    (folder,) = detached_dir.iterdir()
    assert stat.S_IMODE(os.stat(detached_dir).st_mode) == 0o700 and stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    assert {path.name: stat.S_IMODE(os.stat(path).st_mode) for path in folder.iterdir()} == {
        name: 0o600 for name in ("plan.pkl", "host.json", "journal.jsonl", "host.log")
    }
    assert kernel.eval("job.stop(timeout=60)") is True


def test_an_attached_kernel_shows_the_launch_in_its_view_from_the_first_line(in_kernel):
    """The launch's whole log and its metrics, although it ended before this cell attached: the
    finished form a saved notebook keeps, with every rank's lines and the function's chart."""
    kernel = in_kernel
    kernel.ok(
        dedent("""
        from notebook_launcher import attach
        def chatty():
            from trainer_core import Accelerator
            accelerator = Accelerator()
            for step in range(3):
                print(f"step {step} on rank {accelerator.process_index}")
                accelerator.log({"loss": 1.0 / (step + 1)}, step=step)
            return "done"
        launched = launch(chatty, num_processes=2, display="none", detach=True)
        launched.wait(timeout=120)
    """)
    )
    result = kernel.ok("job = attach(launched.id, display='widget'); job.wait(timeout=60)")
    final = [out["display"] for out in result.outputs if "display" in out][-1]
    plain, page = final["text/plain"], final["text/html"]
    assert "[rank 0] step 2 on rank 0" in plain and "[rank 1] step 2 on rank 1" in plain
    assert "step 2 on rank 1" in page and 'data-key="loss"' in page
    assert "succeeded" in plain.splitlines()[0]
