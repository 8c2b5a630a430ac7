"""Launching from a real kernel: the torchrun environment, return values, start methods, the handle.

Every test defines its function in one cell and launches it from the next, as a user would.
"""

import re
from textwrap import dedent

import pytest
from gates import gate_code, open_gates


def test_every_rank_gets_the_torchrun_and_torchelastic_environment(kernel):
    kernel.ok(
        dedent("""
        def env_of_rank():
            import torch.distributed as dist
            keys = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK",
                    "MASTER_ADDR", "MASTER_PORT", "ACCELERATE_MIXED_PRECISION", "GROUP_WORLD_SIZE", "ROLE_NAME",
                    "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_USE_AGENT_STORE"]
            env = {key: os.environ.get(key) for key in keys}
            env["launched by torchelastic"] = dist.is_torchelastic_launched()
            env["run id"] = os.environ["TORCHELASTIC_RUN_ID"]
            # what C code and the rank's own processes see, and the bytes view of it
            import subprocess
            env["a child sees"] = subprocess.check_output(["sh", "-c", "echo $RANK $WORLD_SIZE"], text=True)
            env["environb"] = os.environb[b"LOCAL_RANK"].decode()
            return env
        job = launch(env_of_rank, num_processes=2, mixed_precision="bf16")
        job.wait()
    """)
    )
    envs = kernel.eval("job.results")
    port = kernel.eval("job.master_port")
    assert envs[0]["run id"] == envs[1]["run id"] != ""
    for rank, env in enumerate(envs):
        del env["run id"]
        assert env == {
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": "2",
            "LOCAL_WORLD_SIZE": "2",
            "GROUP_RANK": "0",
            "NODE_RANK": "0",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "ACCELERATE_MIXED_PRECISION": "bf16",
            "GROUP_WORLD_SIZE": "1",
            "ROLE_NAME": "default",
            "TORCHELASTIC_RESTART_COUNT": "0",
            "TORCHELASTIC_MAX_RESTARTS": "0",
            "TORCHELASTIC_USE_AGENT_STORE": "True",
            "launched by torchelastic": True,
            "a child sees": f"{rank} 2\n",
            "environb": str(rank),
        }


def test_a_forked_ranks_c_environment_is_the_kernels_with_the_ranks_variables(kernel):
    """A forked rank's C environment (what C code and the rank's processes see) is the kernel's
    with the rank's variables: every variable of the kernel's, also one set by C code that
    ``os.environ`` never saw; the rank's replacing the kernel's of the same name, once; setting and
    removing variables inside the rank keep working; the kernel's own is left as it was."""
    kernel.ok(
        dedent("""
        import ctypes, subprocess
        ctypes.CDLL(None).setenv(b"ONLY_IN_C", b"set by C code", 1)
        os.environ["ROLE_NAME"] = "the kernel's"   # a variable every rank sets for itself
        WATCHED = ("ONLY_IN_C", "ROLE_NAME", "SET_IN_RANK", "LOCAL_WORLD_SIZE", "WORLD_SIZE")
        def c_environment():
            os.environ["SET_IN_RANK"] = "yes"
            del os.environ["LOCAL_WORLD_SIZE"]
            lines = subprocess.check_output(["env"], text=True).splitlines()
            return sorted(line for line in lines if line.partition("=")[0] in WATCHED)
        kernel_env = subprocess.check_output(["env"], text=True)
    """)
    )
    try:
        kernel.ok("job = launch(c_environment, num_processes=2, start_method='fork', display='none'); job.wait()")
        expected = ["ONLY_IN_C=set by C code", "ROLE_NAME=default", "SET_IN_RANK=yes", "WORLD_SIZE=2"]
        assert kernel.eval("job.results") == [expected, expected]
        assert kernel.eval("subprocess.check_output(['env'], text=True) == kernel_env") is True
    finally:
        kernel.ok("del os.environ['ROLE_NAME']\nctypes.CDLL(None).unsetenv(b'ONLY_IN_C')")


def test_plain_init_process_group_all_reduce_returns_rank_0_value(kernel):
    kernel.ok(
        dedent("""
        import torch, torch.distributed as dist
        def all_reduce_ranks(scale):
            dist.init_process_group("gloo")
            t = torch.tensor([dist.get_rank() + 1.0]) * scale
            dist.all_reduce(t)
            return (dist.get_rank(), dist.get_world_size(), t.item())
    """)
    )
    result = kernel.ok("print(notebook_launcher(all_reduce_ranks, args=(10,), num_processes=2))")
    assert result.stdout.strip().splitlines()[-1] == "(0, 2, 30.0)"


def test_hugging_face_accelerate_runs_unchanged(kernel):
    kernel.ok(
        dedent("""
        def with_hf_accelerate():
            import torch
            from accelerate import Accelerator
            accelerator = Accelerator(cpu=True)
            gathered = accelerator.gather(torch.tensor([accelerator.process_index]))
            return accelerator.num_processes, accelerator.distributed_type.value, gathered.tolist()
        job = launch(with_hf_accelerate, num_processes=2); job.wait()
    """),
        timeout=180,
    )
    results = kernel.eval("job.results")
    assert results[0] == (2, "MULTI_CPU", [0, 1])
    assert results[1] == (2, "MULTI_CPU", [0, 1])


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_cell_defined_function_and_class_round_trip(kernel, method):
    kernel.ok(
        dedent("""
        class Point:
            def __init__(self, x): self.x = x
        def make_point(offset):
            return Point(int(os.environ["RANK"]) + offset)
    """)
    )
    kernel.ok(f"job = launch(make_point, args=(100,), num_processes=2, start_method={method!r}); value = job.wait()")
    assert kernel.eval("(isinstance(value, Point), value.x, [p.x for p in job.results], job.plan.start_method)") == (
        True,
        100,
        [100, 101],
        method,
    )


def test_a_spawned_rank_starts_with_the_kernels_seed_and_torch_flags_as_a_forked_one(kernel):
    """``torch.manual_seed(0)`` in a cell means the same under fork, spawn and the start server:
    the same random numbers (torch, Python, NumPy) and the same deterministic/cudnn flags."""
    kernel.ok(
        dedent("""
        import random, numpy, torch
        def draws():
            from torch.backends import cudnn   # a function naming torch.backends.cudnn cannot be cloudpickled
            return (torch.rand(3).tolist(), random.random(), float(numpy.random.rand()),
                    torch.are_deterministic_algorithms_enabled(), cudnn.benchmark)
        def seeded():
            torch.manual_seed(7); random.seed(8); numpy.random.seed(9)
            torch.use_deterministic_algorithms(True); torch.backends.cudnn.benchmark = True
        seeded(); expected = list(draws())
        by_method = {}
        for method in ("fork", "spawn"):
            seeded()
            job = launch(draws, num_processes=2, start_method=method, display="none")
            job.wait()
            by_method[method] = [list(result) for result in job.results]
        torch.use_deterministic_algorithms(False); torch.backends.cudnn.benchmark = False
    """)
    )
    expected = kernel.eval("list(expected)")
    assert expected[3:] == [True, True]
    assert kernel.eval("by_method") == {"fork": [expected, expected], "spawn": [expected, expected]}


def test_auto_forks_a_clean_kernel(kernel):
    result = kernel.ok("job = launch(lambda: 1, num_processes=2); job.wait(); print(job.plan.start_method)")
    assert result.stdout.strip() == "fork"
    assert "spawn" not in result.stderr


def test_single_process_runs_in_its_own_worker_with_capture(kernel):
    result = kernel.ok(
        dedent("""
        def whoami():
            print("inside", os.environ["RANK"], os.environ["WORLD_SIZE"])
            return os.getpid()
        worker_pid = notebook_launcher(whoami, num_processes=1)
        print(worker_pid != os.getpid())
    """)
    )
    assert "[rank 0] inside 0 1" in result.stdout
    assert result.stdout.strip().endswith("True")


def test_forked_ranks_write_through_streams_the_kernel_made_and_a_launch_in_a_rank_makes_its_own(kernel):
    """A forked rank takes the two streams the kernel made once, before forking (each object a rank
    builds costs it copied pages); a launch from inside that rank, which has written through them,
    makes its own for its ranks. Every line arrives either way."""
    result = kernel.ok(
        dedent("""
        from notebook_launcher.rank import capture
        def inner():
            print("inner line")
            return id(sys.stdout)
        def outer():
            print("outer line")
            inner_id = notebook_launcher(inner, num_processes=1, display="text")
            return id(sys.stdout), inner_id
        ids = notebook_launcher(outer, num_processes=1, display="text")
    """)
    )
    outer_id, inner_id = kernel.eval("ids")
    made_stdout = kernel.eval("id(capture._made_streams.stdout)")
    assert outer_id == made_stdout and inner_id != made_stdout
    assert "[rank 0] outer line" in result.stdout and "inner line" in result.stdout


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_ranks_full_collection_does_not_copy_the_kernels_objects(kernel, method):
    """A full garbage collection examines (writes to) every object it tracks: in a rank forked from
    the kernel (or from the spawn path's start server) it would copy every page of the parent's
    objects into the rank. They are frozen when the rank is forked, so the rank's collection is
    quick and copies almost nothing; the kernel unfreezes its own right after the fork."""
    result = kernel.ok(
        dedent(f"""
        import gc, psutil
        kept = [{{"n": i, "s": str(i)}} for i in range(300_000)]   # a kernel holding many objects
        def full_collection():
            process = psutil.Process()
            before = process.memory_full_info().uss
            gc.collect()
            return (process.memory_full_info().uss - before) / 2**20
        copied_mib = notebook_launcher(full_collection, num_processes=1, start_method={method!r})
        print(round(copied_mib, 1), gc.get_freeze_count())
    """),
        timeout=180,
    )
    copied_mib, frozen_in_kernel = result.stdout.split()[-2:]
    assert float(copied_mib) < 8, result.stdout  # unfrozen: 60-80 MiB (the server; the kernel)
    assert frozen_in_kernel == "0"


def test_a_forked_rank_frees_none_of_the_launching_threads_local_values(kernel, tmp_path):
    """Ranks are forked from a supervisor thread, and a forked process deletes every other
    thread's state: the cell's thread-local values would be freed in each rank (each free a
    copy-on-write page fault). The launching thread's state is held, so none is freed there: a
    finalizer on such a value never runs in a rank (without the hold it runs in every one)."""
    freed = tmp_path / "freed"
    result = kernel.ok(
        dedent(f"""
        import threading, weakref
        class Value:
            pass
        cell_local = threading.local()
        cell_local.value = Value()
        def note_freed(path={str(freed)!r}):
            with open(path, "a") as file:
                file.write(f"{{os.getpid()}}\\n")
        weakref.finalize(cell_local.value, note_freed)
        job = launch(lambda: os.getpid(), num_processes=2, start_method="fork", display="none")
        job.wait()
        print(*job.results, type(cell_local.value).__name__)
    """)
    )
    *rank_pids, kept = result.stdout.split()
    assert kept == "Value" and len(rank_pids) == 2
    freed_in = freed.read_text().split() if freed.exists() else []
    assert freed_in == [], f"freed in ranks {freed_in} (the ranks: {rank_pids})"


def test_a_forked_rank_is_its_own_main_process_as_under_torchrun(kernel, tmp_path):
    """A forked rank is set up as multiprocessing sets up its children (the kernel's queues work in
    it, stdin reads /dev/null, threads that are not daemons are waited for) but is its own main
    process, as a rank is under torchrun."""
    kernel.ok(gate_code(tmp_path))
    result = kernel.ok(
        dedent(f"""
        import multiprocessing, sys, threading
        kernel_queue = multiprocessing.get_context("fork").Queue()   # made in the kernel, used by the ranks
        def rank_view():
            kernel_queue.put(int(os.environ["RANK"]))
            def after_the_function():
                wait_at_gate()
                with open(os.path.join({str(tmp_path)!r}, "thread" + os.environ["RANK"]), "w"):
                    pass
            threading.Thread(target=after_the_function).start()   # not a daemon: the rank waits for it
            process = multiprocessing.current_process()
            return process.name, multiprocessing.parent_process(), sys.stdin.read()
        job = launch(rank_view, num_processes=2, start_method="fork", display="none")
        print(sorted(kernel_queue.get(timeout=60) for _ in range(2)))
    """)
    )
    assert result.stdout.strip() == "[0, 1]"
    kernel.ok("while job.rank_status(0) == 'running' or job.rank_status(1) == 'running': job.join(0.02)")
    assert kernel.eval("job.done") is False  # both returned; their threads still wait at the gates
    open_gates(tmp_path, [0, 1])
    assert kernel.eval("job.wait(timeout=60)") == ("MainProcess", None, "")
    assert (tmp_path / "thread0").exists() and (tmp_path / "thread1").exists()
    assert kernel.children() == []


def test_launch_returns_at_once_and_the_handle_reports_progress(kernel, tmp_path):
    kernel.ok(gate_code(tmp_path))
    kernel.ok(
        dedent("""
        def wait_for_gate():
            print("waiting on rank", os.environ["RANK"], flush=True)
            wait_at_gate()                      # blocks until the test opens this rank's gate
            return int(os.environ["RANK"]) * 2
        job = launch(wait_for_gate, num_processes=2, display="none")
    """)
    )
    assert kernel.eval("job.done") is False
    kernel.ok("while job.rank_status(0) != 'running' or job.rank_status(1) != 'running': job.join(0.02)")
    assert kernel.eval("job.status") == "running"
    open_gates(tmp_path, [0, 1])
    assert kernel.eval("job.wait(timeout=60)") == 0
    assert kernel.eval("(job.status, job.results, job.done)") == ("succeeded", [0, 2], True)
    assert kernel.eval("job.logs(1)") == "waiting on rank 1\n"
    assert kernel.eval("[job.rank_status(r) for r in job.ranks]") == ["done", "done"]


def test_stop_ends_a_running_launch(kernel):
    kernel.ok(
        dedent("""
        def block_forever():
            print("up", flush=True)
            threading.Event().wait()
        job = launch(block_forever, num_processes=2, display="none")
    """)
    )
    kernel.ok("while len(job.lines(0)) + len(job.lines(1)) < 2: job.join(0.05)")
    result = kernel.ok("t0 = time.monotonic(); job.stop(); print(round(time.monotonic() - t0, 1), job.status)")
    seconds, status = result.stdout.split()
    assert status == "stopped" and float(seconds) < 3
    assert kernel.children() == []
    error = kernel.run("job.wait()").error
    assert error["ename"] == "LaunchError" and "stopped" in error["evalue"]


def test_free_port_is_chosen_per_launch_and_released(kernel):
    kernel.ok(
        dedent("""
        from notebook_launcher.launching.ports import check_port_free
        ports = []
        for _ in range(3):
            job = launch(lambda: 0, num_processes=2, display="none"); job.wait()
            check_port_free("127.0.0.1", job.master_port)   # raises if still bound
            ports.append(job.master_port)
    """)
    )
    assert len(set(kernel.eval("ports"))) >= 2


def test_more_cpu_ranks_than_cores_run_oversubscribed_with_a_warning(kernel):
    """As torchrun and Accelerate allow: 3-rank logic tested on a 2-core machine (CI has 2 cores)."""
    kernel.ok("import torch, torch.distributed as dist\nRANKS = len(os.sched_getaffinity(0)) + 1")
    kernel.ok(
        dedent("""
        def sum_of_ranks():
            dist.init_process_group("gloo")
            t = torch.tensor([float(dist.get_rank())])
            dist.all_reduce(t)
            return t.item(), dist.get_world_size(), torch.get_num_threads()
    """)
    )
    result = kernel.ok("print(notebook_launcher(sum_of_ranks, num_processes=RANKS))")
    ranks = kernel.eval("RANKS")
    *before, last = result.stdout.strip().splitlines()
    assert last == str((float(sum(range(ranks))), ranks, 1))
    assert all("] [Gloo] Rank " in line for line in before)  # torch 2.10's gloo says each rank connected
    cores = ranks - 1
    warning = f"notebook_launcher: {ranks} ranks on {cores} CPU{'s' if cores != 1 else ''}: the ranks share the cores"
    assert result.stderr.startswith(warning) and len(result.stderr.strip().splitlines()) == 1


def test_importing_the_package_warms_torchs_lazy_imports_in_the_background():
    """So the first launch in a fresh kernel does not pay for torch._dynamo in every rank."""
    from kernel_session import KernelSession

    session = KernelSession()
    try:
        session.ok("import torch, sys")
        assert session.eval("'torch._dynamo' in sys.modules") is False  # torch imports it lazily
        session.ok("import notebook_launcher")
        warmed = session.eval(
            "__import__('notebook_launcher.backends.local.warmup').backends.local.warmup.wait_for_warmup(120)"
        )
        assert warmed is True and session.eval("'torch._dynamo' in sys.modules") is True  # with no launch yet
        assert session.eval("notebook_launcher.notebook_launcher(lambda: 5, num_processes=2)") == 5
    finally:
        session.shutdown()


def test_a_cell_or_a_launch_that_waits_long_for_the_warm_up_says_so_and_not_as_an_error(tmp_path):
    """The warm-up imports a module held at a FIFO gate, so the wait is as long as the test makes it:
    past ``SAY_AFTER`` seconds, the next cell, and a launch in the cell that started a warm-up, say
    what they wait for, then how long, as plain output (stderr reads as an error); a shorter wait,
    as on most Run Alls, says nothing (``SAY_AFTER`` set out of reach)."""
    from kernel_session import KernelSession

    (tmp_path / "held_import.py").write_text(f"with open({str(tmp_path / 'gate')!r}) as gate:\n    gate.read()\n")
    session = KernelSession()
    try:
        session.ok(
            f"import os, sys\nsys.path.insert(0, {str(tmp_path)!r})\nos.mkfifo({str(tmp_path / 'gate')!r})\n"
            "from notebook_launcher import notebook_launcher\n"
            "from notebook_launcher.backends.local import warmup\nwarmup.SAY_AFTER = 1.0\n"
            "warmup.start_warmup(('held_import',))"
        )
        for cell, waiter in (
            ("print('next cell')", "this cell"),
            ("sys.modules.pop('held_import'); warmup.start_warmup(('held_import',))\n"
             "print(notebook_launcher(lambda: 5, num_processes=1, start_method='fork'))", "the launch"),
        ):  # fmt: skip
            said = f"notebook-launcher: {waiter} waits for the launcher's background import of held_import to finish"
            cell_id = session.submit(cell)
            waiting = session.collect(cell_id, until=lambda result, said=said: said in result.text("stdout"))
            assert "next cell" not in waiting.stdout and "5" not in waiting.stdout  # it has not gone on
            with open(tmp_path / "gate", "w") as gate:
                gate.write("go")
            done = session.collect(cell_id)
            assert done.error is None and done.stderr == ""
            said_done = done.text("stdout")
            assert re.search(rf"notebook-launcher: {waiter} waited \d+\.\d s for it", said_done), said_done
        assert done.stdout.strip().endswith("5")
        session.ok("warmup.SAY_AFTER = 3600\nsys.modules.pop('held_import'); warmup.start_warmup(('held_import',))")
        cell_id = session.submit("print('quiet')")
        with open(tmp_path / "gate", "w") as gate:  # opens once the warm-up reads it: the cell waits on it
            gate.write("go")
        done = session.collect(cell_id)
        assert done.text("stdout") == "quiet\n" and done.stderr == ""  # nothing said
    finally:
        session.shutdown()


def test_a_script_that_exits_with_a_launch_running_ends_its_ranks_and_exits():
    """multiprocessing's exit handler joins forked children; the launcher's must end them first,
    or the interpreter waits for a rank that never returns."""
    import subprocess
    import sys

    import psutil

    script = (
        "import os, threading\n"
        "from notebook_launcher import launch\n"
        "def waits():\n"
        "    print('pid', os.getpid(), flush=True)\n"
        "    threading.Event().wait()\n"
        "job = launch(waits, num_processes=1, display='none')\n"
        "while 'pid' not in job.logs(0):\n"
        "    job.join(0.05)\n"
        "print(job.logs(0).split()[-1], flush=True)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    rank_pid = int(done.stdout.split()[-1])
    assert not psutil.pid_exists(rank_pid) or psutil.Process(rank_pid).status() == psutil.STATUS_ZOMBIE


def test_a_forked_rank_keeps_none_of_the_kernels_server_sockets(kernel, tmp_path):
    """Before: every forked rank held the kernel's ZeroMQ sockets and the listening socket of any
    store the kernel hosted (a fixed port stayed taken while persistent workers ran). A client
    socket the cell opened to another server is kept: the function may use it."""
    kernel.ok(gate_code(tmp_path))
    result = kernel.ok(
        dedent("""
        import psutil, socket, threading, time
        from ipykernel.kernelapp import IPKernelApp
        app = IPKernelApp.instance()
        kernel_ports = {app.shell_port, app.iopub_port, app.stdin_port, app.control_port, app.hb_port}
        def holds_a_store():
            import torch.distributed as dist
            dist.init_process_group("gloo")
            wait_at_gate()
        first = launch(holds_a_store, num_processes=1, display="none")
        store_port, t0 = None, time.monotonic()
        while store_port is None:  # the kernel hosts the first launch's store once its rank connects
            assert time.monotonic() - t0 < 60
            first.join(0.05)
            if first.master_port and any(c.laddr.port == first.master_port and c.status == psutil.CONN_LISTEN
                                         for c in psutil.Process().net_connections(kind="inet")):
                store_port = first.master_port
        outside = socket.create_server(("127.0.0.1", 0))
        client = socket.create_connection(outside.getsockname())
        client_port = client.getsockname()[1]
        def ports_held():
            return sorted({c.laddr.port for c in psutil.Process().net_connections(kind="inet") if c.laddr})
        held = notebook_launcher(ports_held, num_processes=1, start_method="fork", display="none")
        print("RESULT", sorted(kernel_ports & set(held)), store_port in held, client_port in held)
    """),
        timeout=120,
    )
    open_gates(tmp_path, [0])
    kernel.ok("first.wait(timeout=60)\nclient.close(); outside.close()")
    assert result.stdout.split("RESULT ", 1)[1].split() == ["[]", "False", "True"]
