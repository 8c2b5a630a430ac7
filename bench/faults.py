"""Fault handling costs, measured inside one real Jupyter kernel on 2 CPU ranks.

1. Restart: a rank is SIGKILLed mid-training (``max_restarts=1``); the time from its death to the
   restarted group's first completed step (an all_reduce), notebook_launcher (fork) against Hugging
   Face Accelerate's ``notebook_launcher`` (torch elastic's agent; same ``monitor_interval=0.1``).
2. ``Launch.stacks()`` on a running launch: how long the call takes, and how much the ranks' own
   work slows down while stacks are taken ten times a second.

Run: make bench   (or: .venv/bin/python bench/faults.py [--rounds 5])
"""

from __future__ import annotations

import argparse
import os
import sys
from statistics import median

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from kernel import run_rounds

SETUP = r"""
import contextlib, inspect, io, json, os, signal, subprocess, sys, tempfile, time
from notebook_launcher import launch, notebook_launcher
from notebook_launcher.launching.ports import free_port

MARKS = tempfile.mkdtemp()

def crash_then_train(marks):
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    rank = dist.get_rank()
    total = torch.ones(1)
    dist.all_reduce(total)
    if attempt == 0:
        if rank == 1:
            with open(os.path.join(marks, "death"), "w") as f:
                f.write(repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)
        dist.barrier()   # rank 0 waits for the peer that died
        return
    dist.all_reduce(total)                      # the restarted group's first step
    if rank == 0:
        with open(os.path.join(marks, "first"), "w") as f:
            f.write(repr(time.time()))

ACCELERATE = os.path.join(MARKS, "accelerate_restart.py")
with open(ACCELERATE, "w") as f:
    f.write(
        "import sys\n"
        "from accelerate import notebook_launcher\n"
        "from faults_train import crash_then_train\n"
        "if __name__ == '__main__':\n"
        "    notebook_launcher(crash_then_train, (sys.argv[1],), num_processes=2, max_restarts=1,\n"
        "                      monitor_interval=0.1, use_port=sys.argv[2])\n"
    )
with open(os.path.join(MARKS, "faults_train.py"), "w") as f:   # fork needs the function importable
    f.write("import os, signal, time\n" + inspect.getsource(crash_then_train))

def accelerate_restart():
    # Accelerate's launcher runs in a child Python, so that a restart that hangs (it happens) ends
    # after a bound instead of taking the benchmark with it
    process = subprocess.Popen(
        [sys.executable, ACCELERATE, MARKS, str(free_port("127.0.0.1"))],
        cwd=MARKS, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise

def restart_time(run):
    for name in ("death", "first"):
        if os.path.exists(os.path.join(MARKS, name)):
            os.remove(os.path.join(MARKS, name))
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            run()
    except Exception:
        return None   # the restart failed or hung
    read = lambda name: float(open(os.path.join(MARKS, name)).read())
    return read("first") - read("death") if os.path.exists(os.path.join(MARKS, "first")) else None

RESTARTERS = {
    "notebook_launcher (fork)": lambda: notebook_launcher(
        crash_then_train, (MARKS,), num_processes=2, max_restarts=1, monitor_interval=0.1, display="none"),
    "accelerate notebook_launcher (torch elastic)": accelerate_restart,
}
RESTARTS = {name: [] for name in RESTARTERS}
for run in RESTARTERS.values():
    restart_time(run)    # warm-up

def busy(seconds):
    import torch
    x = torch.ones(64)
    steps, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        x = x * 1.0001
        steps += 1
    return steps / seconds

def step_rate(take_stacks):
    job = launch(busy, (2.0,), num_processes=2, display="none")
    calls = []
    while not job.done:
        if take_stacks:
            start = time.monotonic()
            job.stacks()
            calls.append(time.monotonic() - start)
        job._done.wait(0.1)
    job.wait()
    return sum(job.results) / 2, calls

STACKS = {"steps/s without stacks": [], "steps/s with stacks every 0.1 s": [], "stacks() call": []}
"""

ROUND = r"""
for name, run in RESTARTERS.items():
    RESTARTS[name].append(restart_time(run))
STACKS["steps/s without stacks"].append(step_rate(False)[0])
rate, calls = step_rate(True)
STACKS["steps/s with stacks every 0.1 s"].append(rate)
STACKS["stacks() call"].extend(calls)
"""

REPORT = r"""
print(json.dumps({"restarts": RESTARTS, "stacks": STACKS}))
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    data = run_rounds(SETUP, ROUND, REPORT, args.rounds)
    print(f"\nRank SIGKILLed, max_restarts=1: death → restarted group's first step, {args.rounds} rounds")
    print("(medians of the rounds whose restart worked)\n")
    print(f"{'launcher':<46} {'death→first step':>17} {'failed or hung':>15}")
    for name, runs in data["restarts"].items():
        times = [run for run in runs if run is not None]
        shown = f"{median(times) * 1000:>15.0f}ms" if times else f"{'—':>17}"
        print(f"{name:<46} {shown} {len(runs) - len(times):>12} of {len(runs)}")
    stacks = data["stacks"]
    calls = sorted(stacks["stacks() call"])
    plain, sampled = median(stacks["steps/s without stacks"]), median(stacks["steps/s with stacks every 0.1 s"])
    print(f"\nLaunch.stacks() on 2 running CPU ranks ({len(calls)} calls)\n")
    print(f"{'stacks() call, median':<46} {median(calls) * 1000:>15.1f}ms")
    print(f"{'stacks() call, 95th percentile':<46} {calls[int(0.95 * (len(calls) - 1))] * 1000:>15.1f}ms")
    print(f"{'rank work, stacks taken 10×/s vs none':<46} {sampled / plain:>16.3f}x")


if __name__ == "__main__":
    main()
