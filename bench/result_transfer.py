"""Returning a 200 MB state dict from a launch, measured inside one real Jupyter kernel.

Time from the moment rank 0's function returns (a timestamp it returns) to the moment the cell has
the value, on 2 CPU processes (rank 1 returns a small value). Compared:

* notebook_launcher, fork and spawn: tensors through shared memory (the default);
* the same with ``NOTEBOOK_LAUNCHER_SHARED_DIR=off``: the whole value pickled through the pipe;
* raw ``torch.multiprocessing`` (fork), the value put on a ``torch.multiprocessing`` queue (torch's
  own shared-memory reductions) and read by the parent before joining;
* Hugging Face Accelerate's ``notebook_launcher`` returns nothing: not comparable, listed as such.

Target (issue #11): ≤ 0.5 s for the 200 MB state dict.

Run: make bench   (or: .venv/bin/python bench/result_transfer.py [--rounds 5])
"""

from __future__ import annotations

import argparse
import os
import sys
from statistics import median

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from intervals import decided, median_of
from kernel import run_rounds

SETUP = r"""
import json, os, time
import torch, torch.multiprocessing as torch_mp
from notebook_launcher import notebook_launcher

def state_dict():
    import torch
    if int(os.environ.get("RANK", "0")) != 0:
        return None, time.time()
    layers = {f"layer{i}.weight": torch.randn(1000, 5000) for i in range(10)}   # 10 x 20 MB
    return layers, time.time()

def ours(method, shared=True):
    def run():
        if not shared:
            os.environ["NOTEBOOK_LAUNCHER_SHARED_DIR"] = "off"
        try:
            return notebook_launcher(state_dict, num_processes=2, start_method=method, display="none")
        finally:
            os.environ.pop("NOTEBOOK_LAUNCHER_SHARED_DIR", None)
    return run

def raw_entry(index, queue, received):
    os.environ["RANK"] = str(index)
    value = state_dict()
    if index == 0:
        queue.put(value)
        received.wait()   # torch's reductions need the sender alive until the receiver has the tensors

def raw_fork():
    context = torch_mp.get_context("fork")
    queue, received = context.SimpleQueue(), context.Event()
    processes = [context.Process(target=raw_entry, args=(i, queue, received)) for i in range(2)]
    for p in processes:
        p.start()
    value = queue.get()
    received.set()
    for p in processes:
        p.join()
    return value

RUNNERS = {
    "notebook_launcher fork (shared memory)": ours("fork"),
    "notebook_launcher spawn (shared memory)": ours("spawn"),
    "notebook_launcher fork (pickled through the pipe)": ours("fork", shared=False),
    "notebook_launcher spawn (pickled through the pipe)": ours("spawn", shared=False),
    "torch.multiprocessing fork + torch queue": raw_fork,
}
TIMES = {name: [] for name in RUNNERS}

def measure(run):
    value, returned_at = run()
    arrived = time.time()
    assert sum(t.numel() for t in value.values()) * 4 == 200_000_000
    return arrived - returned_at

for run in RUNNERS.values():   # warm-up: first-time imports are not transfer time
    measure(run)
"""

ROUND = r"""
for name, run in RUNNERS.items():
    TIMES[name].append(measure(run))
"""

REPORT = r"""
print(json.dumps(TIMES))
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    times = run_rounds(SETUP, ROUND, REPORT, args.rounds)
    print(f"\nReturning a 200 MB state dict from rank 0 of 2 CPU ranks, {args.rounds} interleaved rounds (medians)\n")
    print(f"{'launcher':<52} {'return→in the cell':>20}")
    medians = {name: median(runs) for name, runs in times.items()}
    for name, seconds in medians.items():
        print(f"{name:<52} {seconds * 1000:>18.0f}ms")
    print(f"{'accelerate notebook_launcher':<52} {'n/a (returns None)':>20}")
    print("\ntarget ≤ 0.5 s:")
    for name in ("notebook_launcher fork (shared memory)", "notebook_launcher spawn (shared memory)"):
        print(f"  {name}: {decided(*median_of(times[name]), 0.5, 's')}")


if __name__ == "__main__":
    main()
