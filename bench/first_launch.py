"""The first launch in a fresh kernel: what it costs and where the time goes.

A later launch in a kernel takes a fraction of a second; the first can take seconds, because
something has to import torch (and the launcher's rank-side modules) once. With fork, the kernel
imports them between cells (the warm-up), so the ranks inherit them; a launch in the same cell as
the import waits for them. Times are the cells' as the user waits for them (the kernel's hooks
before and after each cell included). Each row is a fresh kernel, times are medians over ``--rounds`` kernels:

* ``import``: the cell ``from <launcher> import notebook_launcher`` (what the user runs first; a
  second notebook_launcher row runs ``import torch`` in that cell too, as most notebooks begin);
* ``first launch``: the next cell, launching on 2 CPU processes (call → return) a function that
  builds an optimizer and takes one step (``--function noop``: a no-op);
* ``second launch``: the same call again;

for notebook_launcher (fork, text display), Hugging Face Accelerate's notebook_launcher (fork), and
raw ``torch.multiprocessing.start_processes`` (fork) after ``import torch``.

Run: .venv/bin/python bench/first_launch.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from statistics import median

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from kernel import BenchKernel

CONTENDERS = {
    "notebook_launcher": (
        "from notebook_launcher import notebook_launcher",
        "notebook_launcher({function}, num_processes=2, display='text')",
    ),
    "notebook_launcher, torch imported first": (
        "import torch\nfrom notebook_launcher import notebook_launcher",
        "notebook_launcher({function}, num_processes=2, display='text')",
    ),
    "accelerate": (
        "from accelerate import notebook_launcher",
        "notebook_launcher({function}, num_processes=2)",
    ),
    "torch.multiprocessing": (
        "import torch, torch.multiprocessing as torch_mp",
        "torch_mp.start_processes(lambda_free_{function}, nprocs=2, start_method='fork')",
    ),
}


NOOP = """
import contextlib, io, os
def noop():
    return os.environ.get("RANK")
def lambda_free_noop(index):
    return None
def one_step():                      # what every training function does first
    import torch
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)   # imports torch._dynamo, lazily
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()
def lambda_free_one_step(index):
    one_step()
"""


def _seconds(kernel: BenchKernel, code: str) -> float:
    """The cell's time as the user waits for it (the kernel's hooks before and after the cell included)."""
    started = time.perf_counter()
    kernel.run("with contextlib.redirect_stdout(io.StringIO()):\n    " + code.replace("\n", "\n    "))
    return time.perf_counter() - started


def one_kernel(name: str, function: str) -> dict[str, float]:
    importing, launching = CONTENDERS[name]
    launching = launching.format(function=function)
    kernel = BenchKernel()
    try:
        kernel.run(NOOP)
        return {
            "import": _seconds(kernel, importing),
            "first launch": _seconds(kernel, launching),
            "second launch": _seconds(kernel, launching),
        }
    finally:
        kernel.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--function", choices=("one_step", "noop"), default="one_step")
    options = parser.parse_args()
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in CONTENDERS}
    for _ in range(options.rounds):  # interleaved: a busy moment hits every contender alike
        for name in CONTENDERS:
            rows[name].append(one_kernel(name, options.function))
    print(
        f"first launch of {options.function} in a fresh kernel, 2 CPU processes, fork,"
        f" medians of {options.rounds} kernels (s)"
    )
    print(f"{'':40}{'import':>10}{'first launch':>15}{'second launch':>15}")
    table = {}
    for name, runs in rows.items():
        cells = {key: median(run[key] for run in runs) for key in runs[0]}
        table[name] = cells
        widths = zip(cells.values(), (10, 15, 15), strict=True)
        print(f"{name:40}" + "".join(f"{value:>{width}.2f}" for value, width in widths))
    print(json.dumps(table))


if __name__ == "__main__":
    main()
