"""Training that survives faults: elastic restarts, resuming from the last checkpoint, and the
scenarios of Hugging Face Accelerate's own notebook-launcher tests run against ours."""

from __future__ import annotations

import itertools
import time
from textwrap import dedent


def test_a_failed_attempt_is_restarted_with_the_restart_count_and_a_fresh_port(kernel):
    kernel.ok(
        dedent("""
        def flaky():
            import torch.distributed as dist
            dist.init_process_group("gloo")
            attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
            print(f"attempt {attempt} of max {os.environ['TORCHELASTIC_MAX_RESTARTS']} on port"
                  f" {os.environ['MASTER_PORT']}", flush=True)
            dist.barrier()          # rank 1 fails only once both are connected (and have printed)
            if attempt < 2 and dist.get_rank() == 1:
                raise RuntimeError(f"transient failure {attempt}")
            return attempt
        job = launch(flaky, num_processes=2, max_restarts=2, display="none")
        value = job.wait()
    """)
    )
    assert kernel.eval("(value, job.results, job.attempt, job.status)") == (2, [2, 2], 2, "succeeded")
    log = kernel.eval("job.logs(1)")
    assert "attempt 0 of max 2" in log and "attempt 1 of max 2" in log and "attempt 2 of max 2" in log
    assert "── restart 1 of 2: rank 1 failed: RuntimeError: [rank 1] transient failure 0 ──" in log
    ports = {line.rsplit(" ", 1)[1] for line in log.splitlines() if line.startswith("attempt")}
    assert len(ports) == 3  # a fresh port for every attempt
    assert kernel.children() == []


def test_when_restarts_run_out_the_error_lists_every_attempt(kernel):
    kernel.ok("def always_fails():\n    raise ValueError(f\"attempt {os.environ['TORCHELASTIC_RESTART_COUNT']}\")")
    result = kernel.run("notebook_launcher(always_fails, num_processes=1, max_restarts=2, display='none')")
    assert result.error["ename"] == "ValueError" and result.error["evalue"] == "[rank 0] attempt 2"
    notes = kernel.eval("sys.last_value.__notes__")
    assert notes[-1].splitlines() == [
        "every attempt failed (3 of them, max_restarts=2):",
        "  attempt 0: rank 0: ValueError: [rank 0] attempt 0",
        "  attempt 1: rank 0: ValueError: [rank 0] attempt 1",
        "  attempt 2: rank 0: ValueError: [rank 0] attempt 2",
    ]


RESUMABLE = dedent("""
    import torch, torch.nn as nn, torch.nn.functional as F
    from torch.utils.data import DataLoader, TensorDataset
    from trainer_core import Accelerator, set_seed
    g = torch.Generator().manual_seed(0)
    DATA = TensorDataset(torch.randn(256, 8, generator=g), torch.randint(0, 3, (256,), generator=g))

    def resumable(project, crash_at):
        set_seed(0)
        accelerator = Accelerator(project_dir=project)
        model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 3))
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        loader = DataLoader(DATA, batch_size=16, shuffle=True)
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        accelerator.load_state()              # the latest checkpoint of the project, if there is one
        per_epoch = len(loader)
        start_epoch, skip = divmod(accelerator.step, per_epoch)
        for epoch in range(start_epoch, 3):
            batches = accelerator.skip_first_batches(loader, skip) if epoch == start_epoch else loader
            for x, y in batches:
                accelerator.backward(F.cross_entropy(model(x), y))
                optimizer.step(); optimizer.zero_grad()
                accelerator.step += 1
                if accelerator.step % 5 == 0:
                    accelerator.save_state()
                if accelerator.step == crash_at and os.environ["TORCHELASTIC_RESTART_COUNT"] == "0" \\
                        and accelerator.process_index == 1:
                    os.kill(os.getpid(), signal.SIGKILL)          # mid-epoch, after the last checkpoint
        return {k: v.clone() for k, v in accelerator.unwrap_model(model).state_dict().items()}
""")


def test_a_rank_killed_mid_epoch_restarts_and_resumes_to_the_same_weights(kernel, tmp_path):
    kernel.ok(RESUMABLE)
    kernel.ok(
        f"straight = notebook_launcher(resumable, args=({str(tmp_path / 'a')!r}, None), num_processes=2,"
        f" display='none')"
    )
    kernel.ok(
        f"job = launch(resumable, args=({str(tmp_path / 'b')!r}, 13), num_processes=2, max_restarts=1,"
        f" display='none'); resumed = job.wait()"
    )
    assert kernel.eval("job.attempt") == 1
    assert "killed by signal SIGKILL" in kernel.eval("job.logs(1)")
    # same data order, same RNG states, same optimizer state: equal to float precision (tolerance 1e-6)
    assert kernel.eval("all(torch.allclose(straight[k], resumed[k], atol=1e-6, rtol=0) for k in straight)")
    checkpoints = sorted(p.name for p in (tmp_path / "b" / "checkpoints").iterdir())
    assert checkpoints and all(name.startswith("checkpoint_") for name in checkpoints)


# -- the scenarios of accelerate/test_utils/scripts/test_notebook.py, with our launcher -------------


def test_accelerate_scenario_basic_launch_and_process_group(kernel):
    kernel.ok(
        dedent("""
        def basic_function():
            from accelerate import PartialState
            print(f"PartialState:\\n{PartialState()}")
        def process_group():
            from accelerate import PartialState
            state = PartialState(cpu=True)       # on CPUs Accelerate's state needs cpu=True to be distributed
            return state.num_processes, state.process_index, state.distributed_type.value
        job = launch(basic_function, (), 2, display="none"); job.wait()
        group = launch(process_group, (), 2, display="none"); group.wait()
    """),
        timeout=180,
    )
    assert "PartialState:" in kernel.eval("job.logs(0)") and "PartialState:" in kernel.eval("job.logs(1)")
    assert kernel.eval("group.results") == [(2, 0, "MULTI_CPU"), (2, 1, "MULTI_CPU")]


def test_accelerate_scenario_static_and_c10d_rendezvous(kernel):
    kernel.ok(
        "def world():\n    import torch, torch.distributed as dist\n    dist.init_process_group('gloo')\n"
        "    size = torch.ones(1)\n    dist.all_reduce(size)\n    return int(size.item())"
    )
    for backend in ("static", "c10d"):
        assert kernel.eval(f"notebook_launcher(world, (), 2, rdzv_backend={backend!r}, display='none')") == 2


def test_accelerate_scenario_fault_tolerant(kernel):
    """Fails until a queue shared with the kernel runs down, then succeeds, within max_restarts."""
    kernel.ok(
        dedent("""
        import torch.multiprocessing as mp
        def tough_nut_function(queue):
            if queue.empty():
                return
            trial = queue.get()
            if trial > 0:
                queue.put(trial - 1)
                raise RuntimeError("The nut hasn't cracked yet! Try again.")
            return "cracked"
        queue = mp.get_context("fork").Queue()
        queue.put(3)
        job = launch(tough_nut_function, (queue,), 1, max_restarts=3, display="none"); value = job.wait()
    """)
    )
    assert kernel.eval("(value, job.attempt)") == ("cracked", 3)


def test_a_rank_that_raised_is_left_to_exit_whole(kernel, tmp_path):
    """A rank that reported its error is exiting on its own: the launcher does not SIGTERM it, so
    its exit runs whole (here a thread the function started; in the scenario above, the feeder
    thread that writes the queue's item, which a SIGTERM lost in a CI run). The grace period still
    bounds it: a rank that does not end is killed after it."""
    marker = tmp_path / "finished"
    kernel.ok(
        dedent(f"""
        import threading, time
        def raises_while_its_thread_finishes():
            def finish():
                time.sleep(1.0)
                open({str(marker)!r}, "w").write("done")
            threading.Thread(target=finish).start()
            raise RuntimeError("failed while its thread finishes")
    """)
    )
    result = kernel.run(
        "notebook_launcher(raises_while_its_thread_finishes, num_processes=2, grace_period=30, display='none')"
    )
    assert result.error["ename"] == "RuntimeError"
    assert marker.read_text() == "done"
    assert kernel.children() == []


def test_accelerate_scenario_monitoring(kernel):
    """An even rank fails at once while an odd one sleeps: the launch ends well before the sleep."""
    kernel.ok(
        dedent("""
        def bipolar_sleep_function(sleep_sec):
            from accelerate import PartialState
            if PartialState().process_index % 2 == 0:
                raise RuntimeError("I'm an even process. I don't like to sleep.")
            time.sleep(sleep_sec)
    """)
    )
    result = kernel.run(
        "t0 = time.monotonic()\nnotebook_launcher(bipolar_sleep_function, (100,), 2, monitor_interval=0.01)"
    )
    assert result.error["ename"] == "RuntimeError"
    assert "I'm an even process. I don't like to sleep." in result.error["evalue"]
    assert kernel.eval("time.monotonic() - t0") < 30


def test_timeout_bounds_the_whole_launch_not_each_attempt(kernel):
    """timeout=3 with endless restarts ends in about 3 s (each attempt used to get its own 3 s)."""
    kernel.ok(
        dedent("""
        def fails_after_a_while():
            time.sleep(1.2)       # each attempt lives a while before it fails
            raise RuntimeError("again")
    """)
    )
    result = kernel.run(
        "t0 = time.monotonic()\n"
        "try:\n"
        "    notebook_launcher(fails_after_a_while, num_processes=1, max_restarts=10**9, timeout=3, display='none')\n"
        "finally:\n"
        "    took = time.monotonic() - t0",
        timeout=60,
    )
    assert result.error["ename"] in ("LaunchTimeout", "RuntimeError")
    assert kernel.eval("took") < 3 + 4  # the timeout, then the stacks wait and the grace period at most
    assert kernel.eval("__import__('notebook_launcher').last_launch().attempt") <= 3
    assert kernel.children() == []


def test_an_interrupt_between_two_attempts_stops_the_launch(kernel, tmp_path):
    """A rank that fails at once restarts back to back, so most of the time is spent between attempts:
    the interrupt must end the launch wherever it lands, never leave it running in the background."""
    starts = tmp_path / "starts"
    kernel.ok(
        "def fails_at_once():\n"
        f"    with open({str(starts)!r}, 'a') as file:\n"
        "        file.write('start\\n')\n"
        "    raise RuntimeError('again')"
    )
    msg_id = kernel.submit("notebook_launcher(fails_at_once, num_processes=1, max_restarts=10**9, display='none')")
    deadline = time.monotonic() + 60
    while not starts.exists() or starts.read_text().count("start") < 5:  # a few restarts have happened
        assert time.monotonic() < deadline, "the launch did not restart"
        time.sleep(0.01)  # polling a file the ranks write, bounded by the deadline
    kernel.interrupt()
    result = kernel.collect(msg_id, timeout=30)
    assert result.error["ename"] == "KeyboardInterrupt"
    assert "every rank has ended" in result.error["evalue"]
    assert "still running in the background" not in result.stderr
    assert kernel.eval("__import__('notebook_launcher').last_launch().done") is True
    count = starts.read_text().count("start")
    assert kernel.eval("len(__import__('notebook_launcher').active_launches())") == 0
    assert starts.read_text().count("start") == count  # nothing restarts afterwards
    assert kernel.children() == []


def test_restarts_back_off_instead_of_spinning(kernel, tmp_path):
    """A rank that fails at once restarted 16 times a second: now the first restart is immediate and
    each later one waits twice as long as the one before (0.5 s, 1 s, ...)."""
    starts = tmp_path / "starts"
    kernel.ok(
        "def fails_at_once():\n"
        f"    with open({str(starts)!r}, 'a') as file:\n"
        "        file.write(f'{time.monotonic()}\\n')\n"
        "    raise RuntimeError('again')"
    )
    result = kernel.run("notebook_launcher(fails_at_once, num_processes=1, max_restarts=3, display='none')")
    assert result.error["ename"] == "RuntimeError"
    times = [float(line) for line in starts.read_text().split()]
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert len(times) == 4
    assert gaps[1] >= 0.5 and gaps[2] >= 1.0, gaps  # lower bounds: the backoff's own waits
    assert kernel.children() == []
