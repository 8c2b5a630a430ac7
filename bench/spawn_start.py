"""Spawn-path launch time: 2 CPU ranks whose function imports torch and runs one all_reduce,
measured inside one real Jupyter kernel.

The spawn path is where every Colab/Kaggle user lands once a cell has touched CUDA. Compared:

* notebook_launcher spawn, ranks forked from the warm start server (the default): its first launch
  (which starts the server) and the later ones;
* notebook_launcher spawn with ``NOTEBOOK_LAUNCHER_START_SERVER=off``: a fresh interpreter per rank;
* raw ``torch.multiprocessing.start_processes(..., start_method="spawn")`` (the function lives in a
  module file: raw spawn cannot start a function defined in a cell);
* Hugging Face Accelerate's ``notebook_launcher`` has no spawn path (it forks, and refuses once CUDA
  is initialized): listed as such.

Target (issue #11): ≤ 0.5 s for the 2-rank launch after the first.

Run: make bench   (or: .venv/bin/python bench/spawn_start.py [--rounds 5])
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
import json, os, sys, tempfile, textwrap, time
import torch.multiprocessing as torch_mp
from notebook_launcher import notebook_launcher

MODULE_DIR = tempfile.mkdtemp()
with open(os.path.join(MODULE_DIR, "spawn_bench_module.py"), "w") as f:
    f.write(textwrap.dedent('''
        import os
        def all_reduce_once():
            import torch, torch.distributed as dist
            dist.init_process_group("gloo")
            total = torch.ones(1)
            dist.all_reduce(total)
            dist.destroy_process_group()
            return total.item()
        def raw_entry(index, port):
            os.environ.update(RANK=str(index), LOCAL_RANK=str(index), WORLD_SIZE="2",
                              MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            all_reduce_once()
    '''))
sys.path.insert(0, MODULE_DIR)
from spawn_bench_module import all_reduce_once, raw_entry
from notebook_launcher.launching.ports import free_port

def timed(run):
    start = time.time()
    run()
    return time.time() - start

def server_off():
    os.environ["NOTEBOOK_LAUNCHER_START_SERVER"] = "off"
    try:
        notebook_launcher(all_reduce_once, num_processes=2, start_method="spawn", display="none")
    finally:
        del os.environ["NOTEBOOK_LAUNCHER_START_SERVER"]

RUNNERS = {
    "notebook_launcher spawn (warm start server)":
        lambda: notebook_launcher(all_reduce_once, num_processes=2, start_method="spawn", display="none"),
    "notebook_launcher spawn (fresh interpreters)": server_off,
    "torch.multiprocessing spawn": lambda: torch_mp.start_processes(
        raw_entry, args=(free_port("127.0.0.1"),), nprocs=2, start_method="spawn"),
}
FIRST = timed(RUNNERS["notebook_launcher spawn (warm start server)"])   # starts the server
TIMES = {name: [] for name in RUNNERS}
"""

ROUND = r"""
for name, run in RUNNERS.items():
    TIMES[name].append(timed(run))
"""

REPORT = r"""
print(json.dumps({"first": FIRST, "times": TIMES}))
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    data = run_rounds(SETUP, ROUND, REPORT, args.rounds)
    print(
        f"\nSpawn-path launch, 2 CPU ranks importing torch + one all_reduce, {args.rounds} interleaved rounds"
        " (medians)\n"
    )
    print(f"{'launcher':<48} {'call→return':>12}")
    print(f"{'notebook_launcher spawn, first (starts the server)':<48} {data['first'] * 1000:>10.0f}ms")
    medians = {name: median(runs) for name, runs in data["times"].items()}
    for name, seconds in medians.items():
        print(f"{name:<48} {seconds * 1000:>10.0f}ms")
    print(f"{'accelerate notebook_launcher':<48} {'n/a (no spawn path)':>12}")
    warm = data["times"]["notebook_launcher spawn (warm start server)"]
    print(f"\ntarget ≤ 0.5 s after the first: {decided(*median_of(warm), 0.5, 's')}")


if __name__ == "__main__":
    main()
