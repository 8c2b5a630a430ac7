"""Faults seen from the cell: a rank raises, dies or hangs; the kernel is interrupted; many relaunches.

Timings are upper bounds taken from the kernel's own clock around the call, never sleeps.
"""

import re
import signal
from textwrap import dedent

import pytest

RANK1_RAISES = dedent("""
    def rank1_raises(sibling_mode):
        import torch, torch.distributed as dist
        dist.init_process_group("gloo")
        if dist.get_rank() == 1:
            print("failing at", time.time(), flush=True)
            raise ValueError("bad batch shape (3, 5)")
        if sibling_mode == "collective":
            dist.barrier()                      # waits for rank 1, which never arrives
        else:
            threading.Event().wait()            # blocked where no signal handler runs
""")


def _seconds_since_rank_1_said(kernel, words):
    """Seconds from the moment rank 1 printed ``words`` and its time.time() to now: how long the
    failure took to end the launch and reach the cell, without the kernel's first start-up (torch's
    first import in a fresh kernel takes seconds on a loaded machine)."""
    return kernel.eval(
        f"time.time() - float(__import__('notebook_launcher').last_launch().logs(1).split({words!r})[1].split()[0])"
    )


@pytest.mark.parametrize("sibling_mode", ["collective", "blocked"])
def test_failing_rank_raises_its_own_exception_and_siblings_end(kernel, sibling_mode):
    kernel.ok(RANK1_RAISES)
    result = kernel.run(
        f"t0 = time.monotonic()\nnotebook_launcher(rank1_raises, args=({sibling_mode!r},), num_processes=2)"
    )
    assert result.error["ename"] == "ValueError"
    assert result.error["evalue"] == "[rank 1] bad batch shape (3, 5)"
    # the rank's frames, shown by IPython as for a local error: the cell and line, the source
    assert 'raise ValueError("bad batch shape (3, 5)")' in result.traceback
    assert re.search(r"Cell In\[\d+\], line 6\n", result.traceback)
    assert "[... skipping hidden" in result.traceback  # the launcher's own frames are folded
    assert result.traceback.count("bad batch shape") == 2  # the raise line and the message, once each
    assert _seconds_since_rank_1_said(kernel, "failing at") < 5
    assert kernel.children() == []


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_exception_class_defined_in_a_cell_keeps_its_type(kernel, method):
    kernel.ok(
        dedent("""
        class DataProblem(Exception):
            pass
        def raise_data_problem():
            raise DataProblem(f"rank {os.environ['RANK']} saw a NaN")
    """)
    )
    kernel.ok(
        dedent(f"""
        try:
            notebook_launcher(raise_data_problem, num_processes=2, start_method={method!r})
        except DataProblem as err:
            caught = (type(err).__name__, str(err).startswith("[rank "), "saw a NaN" in str(err))
    """)
    )
    assert kernel.eval("caught") == ("DataProblem", True, True)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_exception_whose_init_takes_other_arguments_keeps_its_type(kernel, method):
    kernel.ok(
        dedent("""
        class NeedsTwo(Exception):
            def __init__(self, a, *, b):
                super().__init__(f"{a}/{b}")     # args=(str,) but __init__ wants more: unpickling fails
                self.b = b
        def raise_needs_two():
            raise NeedsTwo("x", b="y")
    """)
    )
    kernel.ok(
        dedent(f"""
        try:
            notebook_launcher(raise_needs_two, num_processes=1, start_method={method!r})
        except NeedsTwo as err:
            caught = (str(err), err.b)
    """)
    )
    assert kernel.eval("caught") == ("[rank 0] x/y", "y")


def test_an_exception_class_the_kernel_cannot_load_is_a_worker_error_with_the_rank_frames(kernel):
    kernel.ok(
        dedent("""
        def raise_unloadable():
            class MadeInTheRank(Exception):       # made inside the rank, and it cannot be sent by value
                guard = threading.Lock()
            raise MadeInTheRank("lost type")
    """)
    )
    result = kernel.run("notebook_launcher(raise_unloadable, num_processes=1)")
    assert result.error["ename"] == "WorkerError"
    assert "rank 0 raised raise_unloadable.<locals>.MadeInTheRank: lost type" in result.error["evalue"]
    assert 'raise MadeInTheRank("lost type")' in result.traceback  # the rank's frames reach the cell
    assert "handle.py" not in result.traceback


def test_rank_killed_by_a_signal_gives_worker_error_with_the_signal(kernel):
    kernel.ok(
        dedent("""
        def rank1_killed():
            if os.environ["RANK"] == "1":
                print("dying at", time.time(), flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            threading.Event().wait()
    """)
    )
    result = kernel.run("t0 = time.monotonic()\nnotebook_launcher(rank1_killed, num_processes=2)")
    assert result.error["ename"] == "WorkerError"
    assert result.error["evalue"] == "rank 1 was killed by signal SIGKILL (it may have run out of memory)"
    assert kernel.eval("(sys.last_value.rank, sys.last_value.exitcode)") == (1, -9)
    assert _seconds_since_rank_1_said(kernel, "dying at") < 5


def test_a_sigterm_the_launcher_did_not_send_names_its_sender(kernel):
    """A rank ended by another program's SIGTERM (a memory watchdog, a neighbour's script) fails
    with the signal and which process sent it, in the error and in the rank's log."""
    kernel.ok(
        dedent("""
        def rank1_terminated_from_outside():
            if os.environ["RANK"] == "1":
                # the child kills once told to: after Popen has returned, when the rank blocks SIGTERM again
                child = subprocess.Popen(["sh", "-c", f"read go; kill -TERM {os.getpid()}; sleep 30"], stdin=-1)
                child.stdin.write(b"go\\n"); child.stdin.flush()      # the child ends with the rank
            threading.Event().wait()
    """)
    )
    result = kernel.run("import subprocess\nnotebook_launcher(rank1_terminated_from_outside, num_processes=2)")
    assert result.error["ename"] == "WorkerError"
    assert result.error["evalue"] == "rank 1 was killed by signal SIGTERM"
    notes = kernel.eval("sys.last_value.__notes__")
    assert len(notes) == 1 and re.fullmatch(
        r"rank process \d+ was sent SIGTERM by process \d+ \(sh -c read go; kill -TERM \d+; sleep 30\) with kill\(\)",
        notes[0],
    )
    assert notes[0] in result.traceback  # the cell shows it


def test_a_sigterm_no_process_sent_says_where_it_came_from_instead_of_a_pid(capfd):
    """A SIGTERM from a POSIX timer or the kernel carries no sender in ``si_pid`` (what is there is
    other data): the note names the origin instead of a made-up process."""
    from notebook_launcher.rank.capture import _name_the_sender

    _name_the_sender(1599919808, -2)
    assert capfd.readouterr().err.endswith("got a SIGTERM from a POSIX timer (si_code -2)\n")


def _children_ending_under_a_sigchld_handler(count):
    """Start ``count`` short subprocesses with a SIGCHLD handler installed, the interpreter busy in
    between; the output thread's blocked signals (a bit mask), and how many children ran."""
    import os
    import signal
    import subprocess

    from notebook_launcher.rank.capture import OUTPUT_THREAD

    def name(task):
        with open(f"/proc/self/task/{task}/comm") as comm:
            return comm.read().strip()

    signal.signal(signal.SIGCHLD, lambda *_: None)
    for _ in range(count):
        subprocess.run(["true"], check=True)
        sum(i * i for i in range(20000))
    flusher = next(task for task in os.listdir("/proc/self/task") if name(task) == OUTPUT_THREAD)
    with open(f"/proc/self/task/{flusher}/status") as status:
        blocked = next(line for line in status if line.startswith("SigBlk:")).split()[1]
    return int(blocked, 16), count


def test_signals_the_rank_handles_never_read_as_a_sigterm():
    """A signal with a handler (here SIGCHLD, as each child a library runs ends) that interrupted
    the rank's output thread as its wait ran out made CPython's ``sigtimedwait`` return a siginfo it
    never filled in: ranks died "killed by signal SIGTERM ... by process 1599919808" (DeepSpeed's
    ZeRO-3 runs a subprocess). The thread blocks every signal but the two it waits for (checked in
    its mask), and 500 children end cleanly (the old code died in about one run of three at 200)."""
    from ranks import on_ranks

    results = on_ranks(_children_ending_under_a_sigchld_handler, 500, start_method="fork")
    for blocked, ran in results:
        assert ran == 500
        assert blocked & (1 << (signal.SIGCHLD - 1)) and blocked & (1 << (signal.SIGINT - 1))


@pytest.mark.parametrize(
    "exit_code, words",
    [
        ("os._exit(3)", "rank 0 exited with code 3 without returning a result"),
        ("os._exit(0)", "rank 0 exited with code 0 without returning a result"),
    ],
)
def test_rank_exiting_without_returning_gives_worker_error(kernel, exit_code, words):
    kernel.ok(f"def leaves_early():\n    print('about to exit')\n    {exit_code}")
    result = kernel.run("notebook_launcher(leaves_early, num_processes=1)")
    assert result.error["ename"] == "WorkerError"
    assert result.error["evalue"] == words
    assert "[rank 0] about to exit" in result.stdout


def test_sys_exit_with_a_code_in_a_rank_is_a_worker_error_not_a_system_exit(kernel):
    kernel.ok("def calls_sys_exit():\n    sys.exit(2)")
    result = kernel.run("notebook_launcher(calls_sys_exit, num_processes=1)")
    assert result.error["ename"] == "WorkerError"
    assert "rank 0 raised SystemExit: 2" in result.error["evalue"]


def test_sys_exit_zero_in_a_rank_is_a_clean_end(kernel):
    """As under torch.multiprocessing and torchrun: the rank finished, its result is None."""
    kernel.ok("def exits_cleanly():\n    if os.environ['RANK'] == '1':\n        sys.exit()\n    return 'rank 0'")
    kernel.ok("job = launch(exits_cleanly, num_processes=2); value = job.wait()")
    assert kernel.eval("(value, job.results, job.status)") == ("rank 0", ["rank 0", None], "succeeded")


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_exit_and_quit_in_a_rank_end_it_as_in_a_script(kernel, method):
    """A cell's ``exit``/``quit`` are IPython's, which only ask the interactive shell to close: a
    forked rank carried on past them, and a spawned one could not be started ("cannot pickle
    'sqlite3.Connection'"). In a rank they end it as ``sys.exit()`` does."""
    kernel.ok(
        "def exits_early():\n"
        "    print('before')\n"
        "    if os.environ['RANK'] == '1':\n"
        "        quit(3)\n"
        "    exit()\n"
        "    print('after')\n"
        "    return 'not reached'"
    )
    result = kernel.run(f"notebook_launcher(exits_early, num_processes=2, start_method={method!r})")
    assert result.error["ename"] == "WorkerError" and "rank 1 raised SystemExit: 3" in result.error["evalue"]
    kernel.ok(
        "job = launch(lambda: exits_early() if os.environ['RANK'] == '0' else 5, num_processes=2,"
        f" start_method={method!r}, display='none')"
    )
    assert kernel.eval("(job.wait(), job.results, [job.logs(0)])") == (None, [None, 5], ["before\n"])


def test_the_notebooks_shell_is_refused_by_name_for_a_spawned_rank(kernel):
    kernel.ok("def runs_a_command():\n    get_ipython().system('true')")
    result = kernel.run("notebook_launcher(runs_a_command, num_processes=1, start_method='spawn')")
    assert result.error["ename"] == "LaunchError"
    assert "the notebook's IPython shell cannot go to a rank that does not fork the kernel" in result.error["evalue"]
    assert "sqlite3" not in result.error["evalue"]


def test_unpicklable_return_value_is_a_clear_error(kernel):
    kernel.ok("def returns_a_lock():\n    return threading.Lock()")
    result = kernel.run("notebook_launcher(returns_a_lock, num_processes=1)")
    assert result.error["ename"] == "TypeError"
    assert "return value (lock) cannot be sent back to the kernel" in result.error["evalue"]


def test_kernel_interrupt_ends_every_rank_and_the_next_launch_works(kernel):
    kernel.ok(
        dedent("""
        def train_forever():
            import torch.distributed as dist
            dist.init_process_group("gloo")
            print("training", flush=True)
            while True:
                dist.all_reduce(__import__("torch").ones(1))
    """)
    )
    msg_id = kernel.submit("notebook_launcher(train_forever, num_processes=2)")
    kernel.collect(msg_id, timeout=60, until=lambda r: r.stdout.count("training") == 2)
    assert len(kernel.children()) == 2
    kernel.interrupt()
    result = kernel.collect(msg_id, timeout=30)  # result.seconds: from the interrupt to the idle kernel
    assert result.error["ename"] == "KeyboardInterrupt"
    assert result.seconds < 3
    # one clear line, not a traceback through the launcher and threading
    message = result.error["evalue"]  # and where every rank was when it was stopped
    assert re.match(r"launch [0-9a-f]{8} stopped: every rank has ended; where the ranks were:\n", message)
    for rank in (0, 1):
        assert re.search(rf"rank {rank}: in train_forever \(Cell In\[\d+\], line 6\): dist.all_reduce", message)
    assert "threading.py" not in result.traceback and "supervisor" not in result.traceback
    assert "handle.py" not in result.traceback  # the launcher's own frame is not shown either
    assert kernel.children() == []
    assert kernel.ok("print(notebook_launcher(lambda: 'again', num_processes=2))").stdout.strip() == "again"
    # with the widget, the launch's form says where the ranks were no second time: folded, not in its text
    msg_id = kernel.submit("notebook_launcher(train_forever, num_processes=2, display='widget')")
    kernel.collect(msg_id, timeout=60, until=lambda r: "[rank 1] training" in str(r.outputs))
    kernel.interrupt()
    result = kernel.collect(msg_id, timeout=30)
    final = [out["display"] for out in result.outputs if "display" in out][-1]
    assert "where the ranks were" in result.error["evalue"] and "where the ranks were" not in final["text/plain"]
    assert '<details class="nl-stacks"><summary>every thread of every rank as it ended' in final["text/html"]
    assert kernel.children() == []


def test_many_launches_leak_no_process_descriptor_or_port(kernel):
    kernel.ok(
        dedent("""
        import psutil
        from notebook_launcher.launching.ports import check_port_free
        me = psutil.Process()
        def succeed(): return 1
        def fail(): raise RuntimeError("planned")
        def hang(): threading.Event().wait()
        def one_round(i):
            kind = ("ok", "fail", "stop", "spawn")[i % 4]
            if kind == "stop":
                job = launch(hang, num_processes=2, display="none"); job.stop()
            elif kind == "fail":
                job = launch(fail, num_processes=2, display="none")
                try: job.wait()
                except RuntimeError: pass
            else:
                job = launch(succeed, num_processes=2, display="none",
                             start_method="spawn" if kind == "spawn" else "fork")
                assert job.wait() == 1
            check_port_free("127.0.0.1", job.master_port)
            return job.status
        for i in range(4): one_round(i)                   # warm up lazily opened descriptors
        fds_before, threads_before = me.num_fds(), me.num_threads()
        statuses = [one_round(i) for i in range(100)]
        helpers = ("notebook_launcher.rank.start_server", "notebook-launcher-guardian")
        leftover = [c for c in me.children(recursive=True) if not any(h in c.cmdline() for h in helpers)]
        leaks = (me.num_fds() - fds_before, me.num_threads() - threads_before, len(leftover))
    """),
        timeout=600,
    )
    assert kernel.eval("leaks") == (0, 0, 0)
    assert kernel.eval("sorted(set(statuses))") == ["failed", "stopped", "succeeded"]


def test_output_from_python_and_c_is_captured_per_rank(kernel):
    result = kernel.ok(
        dedent("""
        import ctypes
        def chatty():
            rank = os.environ["RANK"]
            print(f"python says hi from {rank}")
            print(f"a warning from {rank}", file=sys.stderr)
            os.write(1, f"raw fd write from {rank}\\n".encode())
            libc = ctypes.CDLL(None)
            libc.puts(f"C puts from {rank}".encode()); libc.fflush(None)
            return rank
        job = launch(chatty, num_processes=2); job.wait()
    """)
    )
    for rank in (0, 1):
        for line in (f"python says hi from {rank}", f"raw fd write from {rank}", f"C puts from {rank}"):
            assert f"[rank {rank}] {line}\n" in result.stdout
        assert f"[rank {rank}] a warning from {rank}\n" in result.stderr
        assert kernel.eval(f"job.logs({rank}, 'stderr')") == f"a warning from {rank}\n"
        assert f"C puts from {rank}" in kernel.eval(f"job.logs({rank}, 'stdout')")


def test_rank_output_appears_while_the_rank_is_still_running(kernel, tmp_path):
    gate = tmp_path / "gate"
    kernel.ok(
        dedent(f"""
        def prints_then_waits():
            print("first line", flush=True)
            with open({str(gate)!r}) as f:      # a FIFO: returns only once the test has seen the line
                f.read()
            print("second line")
        os.mkfifo({str(gate)!r})
    """)
    )
    msg_id = kernel.submit("notebook_launcher(prints_then_waits, num_processes=1)")
    seen = kernel.collect(msg_id, timeout=60, until=lambda r: "[rank 0] first line" in r.stdout)
    assert "second line" not in seen.stdout
    with open(gate, "w") as fifo:
        fifo.write("go")
    rest = kernel.collect(msg_id, timeout=60)
    assert "[rank 0] second line" in rest.stdout


def test_logging_configured_in_the_kernel_goes_to_the_rank_output(kernel):
    result = kernel.ok(
        dedent("""
        import logging
        logging.basicConfig(level=logging.INFO, force=True)
        def logs_something():
            logging.getLogger("train").info("step done on rank %s", os.environ["RANK"])
        notebook_launcher(logs_something, num_processes=2)
        logging.basicConfig(level=logging.WARNING, force=True)
    """)
    )
    assert "[rank 0] INFO:train:step done on rank 0" in result.stderr
    assert "[rank 1] INFO:train:step done on rank 1" in result.stderr


def test_late_output_of_a_background_launch_goes_to_the_launching_cell(kernel, tmp_path):
    """ipykernel >= 7 routes output by context; the supervisor writes from a copy of the launching
    cell's context, so lines printed after that cell finished still belong to it."""
    if kernel.eval("int(__import__('ipykernel').__version__.split('.')[0])") < 7:
        pytest.skip("ipykernel < 7 sends background output to whichever cell is running")
    gate = tmp_path / "gate"
    kernel.ok(
        dedent(f"""
        def prints_late():
            with open({str(gate)!r}) as f:
                f.read()
            print("late line", flush=True)
        os.mkfifo({str(gate)!r})
    """)
    )
    launching = kernel.submit("job = launch(prints_late, num_processes=1, display='text')")
    assert "late line" not in kernel.collect(launching).stdout
    other = kernel.submit("print('another cell'); job.wait()")  # busy while the line is printed
    with open(gate, "w") as fifo:
        fifo.write("go")
    late = kernel.first_message(lambda m: m["msg_type"] == "stream" and "late line" in m["content"]["text"])
    assert late["content"]["text"] == "[rank 0] late line\n"
    assert late["parent_header"]["msg_id"] == launching != other
    kernel.collect(other)


def test_a_terminated_rank_loses_no_printed_line(kernel):
    """Output is batched in the rank; SIGTERM (how the launcher ends ranks) flushes it first, even
    while the rank is blocked in a collective."""
    kernel.ok(
        dedent("""
        def prints_then_blocks():
            import torch, torch.distributed as dist
            dist.init_process_group("gloo")
            if dist.get_rank() == 1:
                dist.barrier()                  # rank 0 prints first; then rank 1 fails
                raise RuntimeError("planned")
            for i in range(5000):
                print(f"line {i}")              # no flush: stays in the rank's buffer
            dist.barrier()
            dist.barrier()                      # blocked here when rank 1 fails
        os.environ["NOTEBOOK_LAUNCHER_FLUSH_INTERVAL"] = "3600"   # only the SIGTERM flush can deliver
        try:
            job = launch(prints_then_blocks, num_processes=2, display="none")
            job.wait()
        except RuntimeError:
            pass
        finally:
            del os.environ["NOTEBOOK_LAUNCHER_FLUSH_INTERVAL"]
    """)
    )
    # torch 2.10's gloo says "[Gloo] Rank 0 is connected to 1 peer ranks..." first
    lines = kernel.eval("[line.text for line in job.lines(0) if not line.text.startswith('[Gloo] Rank ')]")
    assert lines == [f"line {i}\n" for i in range(5000)]
    assert kernel.eval("job.rank_status(0)") == "stopped"


def test_a_rank_that_dies_is_the_cause_not_the_peer_whose_collective_broke(kernel):
    """Rank 1 exits mid-training while rank 0 waits in a barrier; rank 0's gloo error ("Connection
    reset by peer") may reach the kernel first, but the launch names rank 1's death as the failure."""
    kernel.ok(
        dedent("""
        def dies_in_training():
            import torch.distributed as dist
            dist.init_process_group("gloo")
            dist.barrier()
            if dist.get_rank() == 1:
                os._exit(1)
            dist.barrier()
    """)
    )
    for _ in range(3):
        result = kernel.run("notebook_launcher(dies_in_training, num_processes=2, display='none')")
        assert result.error["ename"] == "WorkerError", result.error["evalue"]
        assert "rank 1 exited with code 1 without returning a result" in result.error["evalue"]
    assert kernel.children() == []
