"""Persistent workers and the %dist magics, in a real kernel with real ranks and gloo collectives."""

from __future__ import annotations

import re
from textwrap import dedent

import pytest


@pytest.fixture(autouse=True)
def no_workers_left(kernel):
    """A failed test must not leave its workers to the next one."""
    yield
    kernel.ok("from notebook_launcher.workers import current_workers\nif current_workers(): current_workers().stop()")


@pytest.fixture()
def dist(kernel):
    """Two running fork workers with a gloo process group; stopped (and checked gone) afterwards."""
    kernel.ok("%dist start 2 --backend gloo --display text")
    yield kernel
    kernel.ok("%dist stop")
    assert kernel.children() == []


def test_state_lives_across_cells_and_collectives_run_in_them(dist):
    shown = dist.run(
        "%%dist\nimport torch, torch.distributed as dist\nrank = dist.get_rank()\nt = torch.full((3,), rank + 1.0)\nt"
    )
    assert shown.error is None
    assert "[rank 0] tensor([1., 1., 1.])" in shown.stdout and "[rank 1] tensor([2., 2., 2.])" in shown.stdout
    printed = dist.run("%%dist\ndist.all_reduce(t)\nprint('reduced on', rank, flush=True)")
    assert printed.error is None
    assert "[rank 0] reduced on 0" in printed.stdout and "[rank 1] reduced on 1" in printed.stdout
    dist.ok("from notebook_launcher.workers import current_workers\nworkers = current_workers()")
    assert dist.eval("[v.tolist() for v in workers.pull('t')]") == [[3.0] * 3, [3.0] * 3]
    dist.ok("workers.push(scale=10)")
    assert dist.eval("workers.run(lambda k: k * 2, 21)") == [42, 42]
    assert dist.eval("workers.exec('float(t.sum()) * scale', ranks=[1])") == [90.0]


def test_an_exception_in_a_cell_names_the_cell_line_and_keeps_the_workers(dist):
    failed = dist.run("%%dist\nx = 1\nif rank_value := int(__import__('os').environ['RANK']):\n    1 / 0")
    assert failed.error["ename"] == "ZeroDivisionError"
    assert failed.error["evalue"].startswith("[rank 1] ")
    assert re.search(r"Cell In\[\d+\], line 4", failed.traceback)  # the %%dist cell's own line
    assert "run_cell_magic" not in failed.traceback  # ... and nothing of the magic or the launcher
    assert "magics.py" not in failed.traceback and "handle.py" not in failed.traceback
    assert dist.eval("__import__('notebook_launcher').workers.current_workers().status") == "idle"
    assert dist.run("%%dist\nx + 1").stdout.count("2") >= 2  # the same ranks, the state kept


def test_sys_exit_0_ends_a_dist_cell_as_it_ends_a_script_and_keeps_the_workers(dist):
    """``sys.exit(0)`` (or ``exit()``) on a rank ends that rank's cell well, as it ends a script; a
    non-zero code is the cell's error, named; either way the workers live on."""
    ended = dist.run("%%dist\nimport os, sys\nprint('before', flush=True)\nsys.exit(0)\nprint('after')")
    assert ended.error is None, ended.error
    assert ended.stdout.count("before") == 2 and "after" not in ended.stdout
    failed = dist.run("%%dist\nimport os, sys\nif os.environ['RANK'] == '1':\n    sys.exit(3)")
    assert failed.error["ename"] == "WorkerError" and "rank 1 raised SystemExit: 3" in failed.error["evalue"]
    assert dist.run("%%dist\n'still here'").stdout.count("'still here'") == 2


def test_an_interrupt_ends_the_cell_on_every_rank_and_keeps_the_workers(dist):
    msg_id = dist.submit("%%dist\nimport time\nprint('sleeping', flush=True)\ntime.sleep(600)")
    dist.collect(msg_id, timeout=60, until=lambda r: r.stdout.count("sleeping") == 2)
    dist.interrupt()
    result = dist.collect(msg_id, timeout=30)
    assert result.error["ename"] == "KeyboardInterrupt"
    assert "the workers are kept, with their state" in result.error["evalue"]
    # one clear line: no launcher frames, locals or background-launch notice
    assert result.traceback.strip().splitlines() == [f"KeyboardInterrupt: {result.error['evalue']}"]
    assert "still running in the background" not in result.stderr
    assert result.seconds < 3
    assert dist.run("%%dist\n'still here'").stdout.count("'still here'") == 2


def test_a_dist_cell_ends_as_a_cell_does_one_quiet_line_and_an_interrupt_is_no_failure(kernel):
    """With the widget: a quick ``%%dist`` cell sends one output, its ranks' lines under one dim line
    (no launch header, chips or summary); an interrupt the ranks obey at once leaves one line (the
    cell's KeyboardInterrupt) and a form that says "interrupted", with no failed chip or ✘ line."""
    kernel.ok("%dist start 2 --backend gloo --display widget")
    tiny = kernel.run("%%dist\nx = 1 + 1\nprint('hi', flush=True)")
    assert tiny.error is None
    (only,) = [out["display"] for out in tiny.outputs if "display" in out]
    assert only["text/plain"].splitlines() == ["%%dist on ranks 0, 1 · 0.0 s", "[rank 0] hi", "[rank 1] hi"] or (
        only["text/plain"].splitlines()[1:] == ["[rank 1] hi", "[rank 0] hi"]
    )
    assert 'class="nl-chip' not in only["text/html"] and "notebook_launcher</b> ·" not in only["text/html"]
    msg_id = kernel.submit("%%dist\nimport time\nprint('sleeping', flush=True)\ntime.sleep(600)")
    kernel.collect(msg_id, timeout=60, until=lambda r: any("[rank 1] sleeping" in str(o) for o in r.outputs))
    kernel.interrupt()
    result = kernel.collect(msg_id, timeout=30)
    assert result.error["ename"] == "KeyboardInterrupt" and result.stderr == ""  # one line, the cell's error
    final = [out["display"] for out in result.outputs if "display" in out][-1]
    assert final["text/plain"].startswith("%%dist on ranks 0, 1 · interrupted after ")
    assert "failed" not in final["text/plain"] and "failed" not in final["text/html"] and "✘" not in final["text/html"]
    kernel.ok("%dist stop")


def test_a_second_interrupt_stops_workers_stuck_in_a_collective_and_shows_where(kernel):
    kernel.ok("%dist start 2 --backend gloo --display text")
    # rank 0 says "in" once its main thread is inside the barrier, and ignores SIGINT: a loaded
    # machine may otherwise deliver the first interrupt between its print and the barrier
    msg_id = kernel.submit(
        dedent("""
        %%dist
        import signal, sys, threading, time, traceback, torch.distributed as dist
        def inside_the_barrier(main=threading.main_thread().ident):
            while not any(f.name == "barrier" for f in traceback.extract_stack(sys._current_frames()[main])):
                time.sleep(0.01)   # a poll of the main thread, which cannot signal from inside C
            print("in", flush=True)
        if dist.get_rank() == 0:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            threading.Thread(target=inside_the_barrier, daemon=True).start()
            dist.barrier()          # rank 1 never comes
        else:
            print("in", flush=True)
            while True: pass
        """).strip()
    )
    kernel.collect(msg_id, timeout=60, until=lambda r: r.stdout.count("in") == 2)
    kernel.interrupt()  # rank 1 stops; rank 0 stays in the collective, where SIGINT cannot reach it
    kernel.collect(msg_id, timeout=30, until=lambda r: "interrupt again to stop the workers" in r.stderr)
    kernel.interrupt()
    result = kernel.collect(msg_id, timeout=30)
    assert result.error["ename"] == "KeyboardInterrupt"
    assert "the workers were stopped" in result.error["evalue"]
    assert "rank 0: in <module>" in result.error["evalue"] and "dist.barrier()" in result.error["evalue"]
    assert "no workers are running" in kernel.run("%dist status").stdout
    assert kernel.children() == []


def test_a_dead_rank_ends_the_workers_with_its_reason(kernel):
    kernel.ok("%dist start 2")
    result = kernel.run("%%dist --ranks 1\nimport os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
    assert result.error["ename"] == "WorkerError"
    assert "rank 1" in result.error["evalue"] and "SIGKILL" in result.error["evalue"]
    status = kernel.run("%dist status").stdout  # the reason stays: what ended the workers, not only that they did
    assert "no workers are running: workers " in status and "failed (WorkerError: " in status and "SIGKILL" in status
    later = kernel.run("%%dist\n1").error["evalue"]
    assert "failed (WorkerError: " in later and "SIGKILL" in later and "%dist start N" in later
    assert kernel.children() == []


def test_fifty_cells_leak_nothing_and_stop_leaves_no_process(kernel):
    kernel.ok("%dist start 2 --spawn --display text")
    kernel.ok("import psutil\nme = psutil.Process()")
    kernel.ok("%%dist\nn = 0")
    fds, threads, children = kernel.eval("(me.num_fds(), me.num_threads(), len(me.children(recursive=True)))")
    for _ in range(50):
        assert kernel.run("%%dist\nn += 1").error is None
    after = kernel.eval("(me.num_fds(), me.num_threads(), len(me.children(recursive=True)))")
    # the kernel opens and closes a descriptor of its own now and then; a leak per cell would add 50
    assert after[0] <= fds + 2 and after[1:] == (threads, children)
    assert kernel.run("%%dist\nn").stdout.split() == ["[rank", "0]", "50", "[rank", "1]", "50"]
    assert "workers" in kernel.run("%dist status").stdout
    kernel.ok("%dist stop")
    assert kernel.children() == []


def test_bad_magic_input_is_a_clear_error(kernel):
    assert "no workers are running" in kernel.run("%%dist\n1").error["evalue"]
    assert "usage: %dist start N" in kernel.run("%dist begin").error["evalue"]
    kernel.ok("%dist start 1")
    assert "ranks must be some of [0], got [3]" in kernel.run("%%dist --ranks 3\n1").error["evalue"]
    assert "workers are running already" in kernel.run("%dist start 1").error["evalue"]
    kernel.ok("%dist stop")


def test_the_sidebar_lists_running_workers_and_its_stop_ends_them(kernel):
    from test_kernel_comm import _state

    comm, _ = _state(kernel)
    kernel.ok("%dist start 2")
    first = kernel.comm_message(comm, lambda d: d["type"] == "launch")
    assert first["launch"]["kind"] == "workers"  # from the first message on, never "launch" first
    listed = kernel.comm_message(comm, lambda d: d["type"] == "launch" and d["launch"]["status"] == "running")
    assert listed["launch"]["ranks"] == [0, 1] and listed["launch"]["kind"] == "workers"
    kernel.send_comm(comm, {"type": "stop_launch", "request_id": "w", "id": listed["launch"]["id"]})
    assert kernel.comm_message(comm, lambda d: d["type"] == "reply")["ok"] is True
    kernel.comm_message(comm, lambda d: d["type"] == "launch" and d["launch"]["status"] == "stopped")
    assert "no workers are running" in kernel.run("%dist status").stdout
    assert kernel.children() == []


def test_kernel_shutdown_leaves_no_worker_behind():
    import psutil
    from kernel_session import KernelSession

    session = KernelSession()
    try:
        session.ok("%load_ext notebook_launcher\n%dist start 2 --spawn")
        pids = session.eval("list(__import__('notebook_launcher').workers.current_workers().pids.values())")
        workers = [psutil.Process(pid) for pid in pids]
    finally:
        session.shutdown()
    _, alive = psutil.wait_procs(workers, timeout=10)  # an upper bound: they end with the kernel
    assert alive == []


def test_a_dist_cell_shows_as_a_launch_and_the_saved_notebook_keeps_every_rank(kernel):
    """With the default display a call is shown as a launch of its own while it runs (the live
    widget), then as the compact form the notebook keeps (every rank's lines, how it ended; the
    failing rank's traceback is the cell's error). (The test kernels default to text output; a
    notebook's default is this widget.)"""
    kernel.ok("%dist start 2 --display widget")
    result = kernel.run(
        "%%dist\nimport os, time\nfor i in range(3):\n    print(f'step {i} on', os.environ['RANK'])\n"
        "    time.sleep(0.2)"
    )
    assert result.error is None
    final = [out["display"] for out in result.outputs if "display" in out][-1]
    assert "application/vnd.jupyter.widget-view+json" not in final  # the widget gave way to the static form
    assert "[rank 0] step 2 on 0" in final["text/plain"] and "[rank 1] step 2 on 1" in final["text/plain"]
    assert final["text/plain"].startswith("%%dist on ranks 0, 1 · ") and "step 0 on 1" in final["text/html"]
    failed = kernel.run("%%dist --ranks 1\nprint('about to fail')\n1 / 0")
    assert failed.error["ename"] == "ZeroDivisionError"
    shown = [out["display"] for out in failed.outputs if "display" in out][-1]["text/plain"]
    assert "[rank 1] about to fail" in shown and "%%dist on rank 1 · rank 1 raised ZeroDivisionError" in shown
    kernel.ok("%dist stop")
    assert kernel.children() == []


def test_dist_start_initialises_the_default_process_group_unless_told_not_to(kernel):
    kernel.ok("%dist start 2 --display text")
    try:
        reduced = kernel.run(
            "%%dist\nimport torch, torch.distributed as dist\nt = torch.ones(1)\ndist.all_reduce(t)\nt.item()"
        )
        assert reduced.error is None, reduced.traceback
        assert "[rank 0] 2.0" in reduced.stdout and "[rank 1] 2.0" in reduced.stdout
        assert "gloo" in kernel.run("%%dist\ndist.get_backend()").stdout
    finally:
        kernel.ok("%dist stop")
    kernel.ok("%dist start 2 --backend none --display text")
    try:
        left = kernel.run("%%dist\nimport torch.distributed as dist\ndist.is_initialized()")
        assert "[rank 0] False" in left.stdout and "[rank 1] False" in left.stdout
    finally:
        kernel.ok("%dist stop")
    assert kernel.children() == []


def test_small_cells_get_a_compact_form(kernel):
    """Starting workers shows no launch frame of its set-up call, and a cell that prints nothing shows
    one line, not a box per rank; its summary does not call a value of 5 a str."""
    started = kernel.run("%dist start 2 --display widget")
    try:
        assert started.error is None
        shown = [out["display"] for out in started.outputs if "display" in out]
        assert shown == []  # the process group's set-up is not a cell's call
        five = kernel.run("%%dist\n5")
        final = [out["display"] for out in five.outputs if "display" in out][-1]
        assert final["text/plain"] == "%%dist on ranks 0, 1 · 0.0 s"  # one line
        page = final["text/html"]
        assert '<details class="nl-ranklog"' not in page and 'class="nl-static-log"' not in page
        assert "[rank 0] 5" in five.stdout and "[rank 1] 5" in five.stdout
    finally:
        kernel.ok("%dist stop")
    assert kernel.children() == []


def test_a_call_shows_only_what_its_ranks_wrote_during_it(kernel):
    """A call is a window over the workers' one record: a line a rank's thread writes after a call
    ended shows in no later call, and a display updated by id in a later call shows in that call's
    cell (the earlier cell's saved form keeps the first version)."""
    kernel.ok("%dist start 2 --display widget")
    try:
        first = kernel.run(
            "%%dist\nimport threading\nfrom IPython.display import display\n"
            "shown = display('version one', display_id='progress')\nrelease = threading.Event()\n"
            "def later():\n    release.wait()\n    print('written between calls', flush=True)\n"
            "threading.Thread(target=later).start()\nprint('first call')"
        )
        assert first.error is None, first.traceback
        first_form = [out["display"] for out in first.outputs if "display" in out][-1]["text/plain"]
        assert "'version one'" in first_form and "first call" in first_form
        kernel.ok("from notebook_launcher.workers import current_workers\nworkers = current_workers()")
        kernel.ok("workers.exec('release.set()')")
        kernel.ok(  # an upper bound: the thread prints at once
            "import time\ndeadline = time.monotonic() + 30\n"
            "while not all('written between calls' in workers.launch.logs(r) for r in (0, 1)):\n"
            "    assert time.monotonic() < deadline\n    time.sleep(0.05)"
        )
        second = kernel.run("%%dist\nshown.update('version two')\nprint('second call')")
        assert second.error is None, second.traceback
        second_form = [out["display"] for out in second.outputs if "display" in out][-1]["text/plain"]
        assert "'version two'" in second_form and "second call" in second_form
        assert "written between calls" not in second_form and "first call" not in second_form
        assert "'version one'" not in second_form
        assert kernel.eval("sum('version one' in line.text for line in workers.launch.lines(0))") == 1
    finally:
        kernel.ok("%dist stop")
    assert kernel.children() == []


def test_a_dist_cell_ends_with_its_nested_bars_final_rows(dist):
    """The rows nested bars could still redraw are given out when the call ends, in its own cell."""
    shown = dist.run(
        "%%dist\nfrom tqdm import tqdm\n"
        "for a in tqdm(range(2), desc='outer', position=0, mininterval=0):\n"
        "    for b in tqdm(range(3), desc='inner', position=1, mininterval=0):\n        pass"
    )
    assert shown.error is None, shown.traceback
    for rank in (0, 1):
        lines = shown.stdout.splitlines() + shown.stderr.splitlines()
        rows = [line for line in lines if line.startswith(f"[rank {rank}]")]
        assert [row.split(":")[0] for row in rows] == [f"[rank {rank}] inner"] * 2 + [f"[rank {rank}] outer"], rows
    after = dist.run("%%dist\nprint('next cell')")
    assert "inner" not in after.stdout + after.stderr and "outer" not in after.stdout + after.stderr
