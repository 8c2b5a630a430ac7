"""A launch that really uses the GPUs, from one Jupyter kernel: notebook_launcher, Hugging Face
Accelerate's notebook_launcher and raw ``torch.multiprocessing`` fork, interleaved round by round.

Each rank joins a process group, puts a tensor on its GPU and all-reduces it: what every training
launch pays before its first step (the CUDA context dominates). With two or more GPUs, one rank per
GPU over NCCL; with one GPU, two ranks share it over gloo (NCCL runs one rank per GPU, and
Accelerate runs a one-process launch inside the kernel itself, which would initialise CUDA there).
Without a GPU (the dry run) the ranks put the tensor on the CPU.

Run: python bench/gpu/launch.py [--rounds 8]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from statistics import median

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from intervals import bootstrap_interval
from kernel import run_rounds

SETUP = r"""
import contextlib, io, json, os, time
import torch, torch.multiprocessing as torch_mp
from notebook_launcher import notebook_launcher
from notebook_launcher.devices.probe import nvml_gpu_count
from accelerate import notebook_launcher as accelerate_launcher

GPUS = nvml_gpu_count()
RANKS = GPUS if GPUS >= 2 else 2
BACKEND = "nccl" if GPUS >= 2 else "gloo"

def first_collective():
    import torch.distributed as dist
    local = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local % GPUS) if GPUS else torch.device("cpu")
    if GPUS:
        torch.cuda.set_device(device)
    dist.init_process_group(BACKEND)
    t = torch.ones(1, device=device)
    dist.all_reduce(t)
    assert t.item() == RANKS
    dist.destroy_process_group()

def port():  # picked by the OS: a fixed range could meet another run's store on this machine
    from notebook_launcher.launching.ports import free_port
    return free_port("127.0.0.1")

def raw_entry(index, port):
    os.environ.update(RANK=str(index), LOCAL_RANK=str(index), WORLD_SIZE=str(RANKS),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    first_collective()

RUNNERS = {
    "notebook_launcher": lambda: notebook_launcher(first_collective, num_processes=RANKS, display="none",
                                                   device="cuda" if GPUS >= 2 else "cpu"),
    "accelerate notebook_launcher": lambda: accelerate_launcher(first_collective, num_processes=RANKS,
                                                                use_port=str(port())),
    "torch.multiprocessing fork": lambda: torch_mp.start_processes(raw_entry, args=(port(),), nprocs=RANKS,
                                                                   start_method="fork"),
}
TIMES = {name: [] for name in RUNNERS}

def measure(run):
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        run()
    return time.perf_counter() - start

for run in RUNNERS.values():  # warm-up: first-time imports are not launch time
    measure(run)
"""

ROUND = r"""
NAME = list(RUNNERS)[len(sum(TIMES.values(), [])) % len(RUNNERS)]
TIMES[NAME].append(measure(RUNNERS[NAME]))
"""

REPORT = r"""
print(json.dumps({"times": TIMES, "ranks": RANKS, "gpus": GPUS, "backend": BACKEND,
                  "cuda_initialized_in_kernel": torch.cuda.is_initialized()}))
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    data = run_rounds(SETUP, ROUND, REPORT, args.rounds * 3)
    times = data["times"]
    ours = times["notebook_launcher"]
    print(
        f"\nFirst collective on {data['ranks']} ranks ({data['gpus']} GPU(s), {data['backend']}), one kernel,"
        f" {args.rounds} interleaved rounds (medians, call→return)\n"
    )
    print(f"{'launcher':<30}{'median':>10}{'notebook_launcher / this':>27}{'95% interval':>16}")
    for name, runs in times.items():
        pairs = list(zip(ours, runs, strict=True))
        low, high = bootstrap_interval(pairs, lambda s: median(a for a, _ in s) / median(b for _, b in s))
        print(f"{name:<30}{median(runs) * 1000:>8.0f}ms{median(ours) / median(runs):>26.2f}x{low:>9.2f}-{high:.2f}x")
    print(f"\nCUDA initialised in the kernel afterwards: {data['cuda_initialized_in_kernel']}")
    print(json.dumps({name: median(runs) for name, runs in times.items()}))


if __name__ == "__main__":
    main()
