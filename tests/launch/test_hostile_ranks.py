"""Whatever a rank sends or raises, the kernel's supervisor survives it, reports it as that rank's
failure, and the next launch in the same kernel works.

Each case is followed by an ordinary launch in the same kernel: before the fix, a supervisor thread
that died was put back in the pool and every later launch hung in "starting".
"""

from __future__ import annotations

from textwrap import dedent

import psutil
import pytest

pytestmark = pytest.mark.slow  # the fault soak: a hundred launches (see conftest.py)

HOSTILE = dedent("""
    import pickle, struct
    from notebook_launcher.wire import rank_channel

    class BrokenStr(Exception):
        def __str__(self):
            raise RuntimeError("no str for you")

    class ExitsWhenLoaded:
        def __reduce__(self):
            return (sys.exit, ("unpickled",))

    def broken_str():
        raise BrokenStr("hidden")

    def exits_when_loaded():
        return ExitsWhenLoaded()

    class BlocksWhenLoaded:
        def __reduce__(self):
            return (time.sleep, (600,))

    def blocks_when_loaded():
        return BlocksWhenLoaded()

    # only rank 0 misbehaves, so which rank the error names does not depend on which event came first
    def unknown_kind():
        if rank_channel().rank == 0:
            rank_channel().send("bogus", 1)
        threading.Event().wait()

    def display_without_id():
        if rank_channel().rank == 0:
            rank_channel().send("display", {"data": {"text/plain": "x"}})
        threading.Event().wait()

    def undecodable_event():
        if rank_channel().rank == 0:
            rank_channel().send("metric", ExitsWhenLoaded())
        threading.Event().wait()

    def event_for_another_rank():
        if rank_channel().rank == 0:
            rank_channel().send("status", "running", rank=7)
        threading.Event().wait()

    def writes_to_the_event_pipe():
        if rank_channel().rank == 0:
            os.write(rank_channel()._fd, b"text written where the launcher's events go\\n")
        return "returned"

    def ok():
        return "fine"
""")


@pytest.fixture(scope="module")
def hostile(kernel):
    kernel.ok(HOSTILE)
    return kernel


def _next_launch_works(kernel):
    assert kernel.eval("notebook_launcher(ok, num_processes=2, display='none', timeout=60)", timeout=90) == "fine"
    assert kernel.children() == []


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_an_exception_whose_str_raises_comes_back_as_a_worker_error(hostile, method):
    result = hostile.run(f"notebook_launcher(broken_str, num_processes=1, start_method={method!r}, display='none')")
    assert result.error["ename"] == "WorkerError"
    assert (
        "rank 0 raised BrokenStr: <str() failed: RuntimeError> (its str() raised in the kernel)"
        in (result.error["evalue"])
    )
    assert "the launcher failed" not in result.error["evalue"]
    _next_launch_works(hostile)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_return_value_whose_unpickling_exits_is_that_ranks_failure(hostile, method):
    result = hostile.run(
        f"notebook_launcher(exits_when_loaded, num_processes=1, start_method={method!r}, display='none')"
    )
    assert result.error["ename"] == "WorkerError"
    assert (
        "rank 0's return value could not be unpickled in the kernel: SystemExit: unpickled" in (result.error["evalue"])
    )
    _next_launch_works(hostile)


def test_a_return_value_whose_unpickling_blocks_does_not_hold_up_a_stop(hostile):
    """Before: the supervisor unpickled on its own thread, so a Stop (or an interrupt) did nothing
    until the value's code returned, and the launch read "running" meanwhile."""
    hostile.ok("job = launch(blocks_when_loaded, num_processes=1, display='none')")
    hostile.ok(
        "_t = time.monotonic()\n"
        "while job.rank_status(0) != 'done':  # the value arrived, and is being unpickled\n"
        "    assert time.monotonic() - _t < 60\n"
        "    job.join(0.05)\n"
        "_t = time.monotonic()\n"
        "stopped = job.stop(timeout=30)\n"
        "took = time.monotonic() - _t"
    )
    assert hostile.eval("stopped") is True and hostile.eval("took") < 10
    assert hostile.eval("job.status") == "stopped"
    _next_launch_works(hostile)


@pytest.mark.parametrize(
    "function, words",
    [
        ("unknown_kind", "rank 0 sent an event of unknown kind 'bogus'"),
        ("display_without_id", "rank 0 sent a 'display' event of the wrong shape (a display payload needs the keys"),
        ("undecodable_event", "rank 0 sent an event the kernel could not decode (SystemExit: unpickled)"),
        ("event_for_another_rank", "rank 0 sent a 'status' event for rank 7, which it does not run"),
        # before: "exited with code 0 without returning" (the bytes swallowed the result's frame)
        (
            "writes_to_the_event_pipe",
            "rank 0 sent an event the kernel could not decode (bytes that are not an event frame",
        ),
    ],
)
def test_a_malformed_event_fails_the_rank_that_sent_it(hostile, function, words):
    result = hostile.run(f"notebook_launcher({function}, num_processes=2, display='none')")
    assert result.error["ename"] == "WorkerError"
    assert words in result.error["evalue"]
    _next_launch_works(hostile)


def test_a_process_forked_by_a_rank_does_not_replace_its_result(kernel):
    kernel.ok(
        dedent("""
        def forks_and_returns():
            child = os.fork()
            if child == 0:
                return "from the forked child"   # returns into the launcher, as the rank would
            os.waitpid(child, 0)
            return "from the rank"
    """)
    )
    result = kernel.run("print(notebook_launcher(forks_and_returns, num_processes=1, display='none'))")
    assert result.stdout.strip().splitlines()[-1] == "from the rank"


def test_stacks_of_a_rank_that_unblocked_its_signals_do_not_kill_it(kernel, tmp_path):
    kernel.ok(
        dedent("""
        def unblocks_everything():
            signal.pthread_sigmask(signal.SIG_SETMASK, set())   # as some libraries do
            print("unblocked", flush=True)
            threading.Event().wait()
    """)
    )
    kernel.ok("job = launch(unblocks_everything, num_processes=1, display='none')")
    kernel.ok(
        "t0 = time.monotonic()\n"
        "while 'unblocked' not in job.logs(0):\n"
        "    assert time.monotonic() - t0 < 60\n"
        "    job.join(0.05)"
    )
    assert "in unblocks_everything" in kernel.eval("job.stacks().summary()")
    assert kernel.eval("job.status") == "running"
    assert kernel.eval("job.stop()") is True


def test_a_40_mib_line_without_a_newline_arrives_whole_in_seconds(kernel):
    kernel.ok(
        dedent("""
        def one_long_line():
            sys.stdout.write("x" * (40 << 20))
            sys.stdout.flush()
        t0 = time.monotonic()
        job = launch(one_long_line, num_processes=1, display='none')
        job.wait(timeout=120)
        took = time.monotonic() - t0
    """),
        timeout=180,
    )
    assert kernel.eval("len(job.logs(0))") == (40 << 20) + 1  # the line, ended when the stream closed
    assert kernel.eval("took") < 8  # 12 s when each read re-scanned the whole partial line


def test_a_recursion_error_comes_back_in_seconds_with_the_repeats_folded(kernel):
    kernel.ok(
        dedent("""
        def recurse(n):
            return recurse(n + 1)
        def deep():
            recurse(0)
    """)
    )
    result = kernel.run("t0 = time.monotonic()\nnotebook_launcher(deep, num_processes=1)", timeout=120)
    assert result.error["ename"] == "RecursionError"
    assert result.traceback.count("return recurse(n + 1)") <= 4
    assert "repeated" in result.traceback and "more times" in result.traceback
    assert kernel.eval("time.monotonic() - t0") < 15


def test_interrupting_a_rank_that_holds_the_gil_ends_it_and_says_only_what_is_true(kernel):
    """sum(range(...)) runs in C holding the GIL: the rank can neither answer for its stacks nor take
    SIGTERM, so it is killed after the grace period; the cell says the launch ended, nothing else."""
    kernel.ok("def holds_the_gil():\n    print('looping', flush=True)\n    sum(range(10**15))")
    msg_id = kernel.submit("notebook_launcher(holds_the_gil, num_processes=2)")
    kernel.collect(msg_id, until=lambda result: "looping" in result.stdout, timeout=60)
    kernel.interrupt()
    result = kernel.collect(msg_id, timeout=30)
    assert result.error["ename"] == "KeyboardInterrupt"
    assert "every rank has ended" in result.error["evalue"]
    assert "still running in the background" not in result.stderr
    assert kernel.children() == []


SOAK = dedent("""
    import glob, psutil, subprocess, tempfile
    me = psutil.Process()
    CHILDREN = []

    def killed_with_a_child():
        child = subprocess.Popen(["sleep", "300"])
        with open(os.environ["SOAK_PIDS"], "a") as file:
            file.write(f"{child.pid}\\n")
        os.kill(os.getpid(), signal.SIGKILL)

    def exits_with_a_child():
        child = subprocess.Popen(["sleep", "300"])
        with open(os.environ["SOAK_PIDS"], "a") as file:
            file.write(f"{child.pid}\\n")
        os._exit(3)

    def hangs():
        threading.Event().wait()

    def big_result():
        import torch
        return torch.ones(1 << 19)          # 2 MiB: travels through /dev/shm

    def escapes_then_killed():
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        children = [subprocess.Popen(["sleep", "300"], start_new_session=True, **quiet),
                    subprocess.Popen(["setsid", "sleep", "300"], **quiet)]
        with open(os.environ["SOAK_PIDS"], "a") as file:
            file.write("".join(f"{child.pid}\\n" for child in children))
        os.kill(os.getpid(), signal.SIGKILL)

    class HoldsATensor(Exception):
        def __init__(self, tensor):
            super().__init__("held")
            self.tensor = tensor

    def raises_holding_a_tensor():
        import torch
        raise HoldsATensor(torch.ones(1 << 20))  # 4 MiB: through /dev/shm, as a result's

    ROUNDS = [
        ("ok", lambda: launch(ok, num_processes=2, display="none")),
        ("broken_str", lambda: launch(broken_str, num_processes=1, display="none")),
        ("exits_when_loaded", lambda: launch(exits_when_loaded, num_processes=1, display="none")),
        ("unknown_kind", lambda: launch(unknown_kind, num_processes=2, display="none")),
        ("undecodable", lambda: launch(undecodable_event, num_processes=1, display="none")),
        ("killed", lambda: launch(killed_with_a_child, num_processes=2, display="none")),
        ("exits", lambda: launch(exits_with_a_child, num_processes=1, display="none", start_method="spawn")),
        ("stopped", lambda: launch(hangs, num_processes=2, display="none")),
        ("big", lambda: launch(big_result, num_processes=2, display="none")),
        ("ok spawn", lambda: launch(ok, num_processes=1, display="none", start_method="spawn")),
        ("escapes", lambda: launch(escapes_then_killed, num_processes=1, display="none")),
        ("garbage", lambda: launch(writes_to_the_event_pipe, num_processes=2, display="none")),
        ("tensor error", lambda: launch(raises_holding_a_tensor, num_processes=1, display="none")),
    ]

    def soak_round(i):
        name, start = ROUNDS[i % len(ROUNDS)]
        job = start()
        if name == "stopped":
            job.stop()
        else:
            try:
                job.wait(timeout=60)
            except Exception:
                pass
        return job.status

    def shm():
        return sorted(glob.glob(f"/dev/shm/*{os.getpid()}*"))

    def tmp():
        return sorted(glob.glob(f"{tempfile.gettempdir()}/notebook-launcher-*{os.getpid()}*"))

    def marked_anywhere():
        from notebook_launcher.rank.marked import kernel_prefix, marked
        return marked(kernel_prefix(os.getpid()))

    def helpers(process):
        line = " ".join(process.cmdline())
        return "notebook_launcher.rank.start_server" in line or "notebook-launcher-guardian" in line
""")


def test_a_hundred_launches_with_faults_leave_the_kernel_as_they_found_it(hostile, tmp_path):
    """100 launches in one kernel, the rest hostile around ordinary ones (a rank killed with a child
    running, children that left the rank's session, bytes written to the event pipe, bad events,
    unloadable results, an exception holding a tensor, stops, large results through /dev/shm): the
    kernel ends with the process count, descriptors, threads, /dev/shm and temporary files it started
    with, no process its ranks started is left anywhere on the machine, and the last launch works."""
    hostile.ok(SOAK)
    hostile.ok(f"os.environ['SOAK_PIDS'] = {str(tmp_path / 'pids')!r}")
    hostile.ok(
        dedent("""
        for i in range(len(ROUNDS)): soak_round(i)        # warm up lazily opened descriptors and threads
        before = (me.num_fds(), me.num_threads(), shm(), [c.pid for c in me.children(recursive=True)], tmp())
        statuses = [soak_round(i) for i in range(100)]
        after = (me.num_fds(), me.num_threads(), shm(), [c.pid for c in me.children(recursive=True)], tmp())
        left = [c for c in me.children(recursive=True) if not helpers(c)]
        anywhere = marked_anywhere()
    """),
        timeout=900,
    )
    assert hostile.eval("(after[0] - before[0], after[1] - before[1])") == (0, 0)
    assert hostile.eval("after[2] == before[2] == []") is True
    assert hostile.eval("sorted(after[3]) == sorted(before[3])") is True  # the helpers only, the same ones
    assert hostile.eval("after[4] == before[4]") is True
    assert hostile.eval("left") == [] and hostile.eval("anywhere") == []
    assert hostile.eval("sorted(set(statuses))") == ["failed", "stopped", "succeeded"]
    pids = [int(pid) for pid in (tmp_path / "pids").read_text().split()]
    assert len(pids) >= 20  # a child from every killed and exiting round (a sibling may be ended first)
    alive = [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    assert alive == []
    _next_launch_works(hostile)
