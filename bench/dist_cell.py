"""Latency of a cell run on every rank, measured inside one real Jupyter kernel on 2 CPU ranks.

Compared, for an empty body (``pass``) and for one all_reduce of a small tensor:

* ``%%dist`` on persistent workers (``%dist start 2 --backend gloo``): the magic as the kernel runs it;
* the same body through a fresh launch each time (``notebook_launcher`` with ``display="text"``,
  fork; the all_reduce variant also initialises its process group, as a fresh launch must);
* Hugging Face Accelerate's ``notebook_launcher`` (fork, torch elastic), the fresh-launch way people
  run cells on every rank today.

Target (issue #13): an empty ``%%dist`` cell ≤ 20 ms.

Run: make bench   (or: .venv/bin/python bench/dist_cell.py [--rounds 5])
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
import contextlib, io, json, time
from notebook_launcher import notebook_launcher
from notebook_launcher.launching.ports import free_port
from accelerate import notebook_launcher as accelerate_launcher
get_ipython().run_line_magic("dist", "start 2 --backend gloo")
get_ipython().run_cell_magic("dist", "", "import torch, torch.distributed as dist\nsmall = torch.ones(4)")

def empty():
    pass

def all_reduce():
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    dist.all_reduce(torch.ones(4))

def quiet(run):
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        run()
    return time.perf_counter() - start

WAYS = {
    "%%dist on persistent workers": {
        "empty": lambda: get_ipython().run_cell_magic("dist", "", "pass"),
        "all_reduce": lambda: get_ipython().run_cell_magic("dist", "", "dist.all_reduce(small)"),
    },
    "notebook_launcher, a fresh launch": {
        "empty": lambda: notebook_launcher(empty, num_processes=2, display="text"),
        "all_reduce": lambda: notebook_launcher(all_reduce, num_processes=2, display="text"),
    },
    "accelerate notebook_launcher": {
        "empty": lambda: accelerate_launcher(empty, num_processes=2, use_port=str(free_port("127.0.0.1"))),
        "all_reduce": lambda: accelerate_launcher(all_reduce, num_processes=2, use_port=str(free_port("127.0.0.1"))),
    },
}
TIMES = {way: {body: [] for body in bodies} for way, bodies in WAYS.items()}
for bodies in WAYS.values():
    for run in bodies.values():
        quiet(run)   # warm-up
"""

ROUND = r"""
for way, bodies in WAYS.items():
    for body, run in bodies.items():
        samples = 20 if way.startswith("%%dist") else 3
        TIMES[way][body].extend(quiet(run) for _ in range(samples))
"""

REPORT = r"""
get_ipython().run_line_magic("dist", "stop")
print(json.dumps(TIMES))
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    data = run_rounds(SETUP, ROUND, REPORT, args.rounds)
    print(f"\nA cell on 2 CPU ranks, {args.rounds} interleaved rounds (medians)\n")
    print(f"{'way':<38} {'empty cell':>12} {'one all_reduce':>16}")
    for way, bodies in data.items():
        print(f"{way:<38} {median(bodies['empty']) * 1000:>10.1f}ms {median(bodies['all_reduce']) * 1000:>14.1f}ms")
    empty = data["%%dist on persistent workers"]["empty"]
    print(f"\ntarget an empty %%dist cell ≤ 20 ms: {decided(*median_of(empty), 0.020, 'ms', scale=1000)}")


if __name__ == "__main__":
    main()
