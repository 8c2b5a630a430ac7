"""Launch overhead of two versions of notebook_launcher, compared fairly on a noisy machine.

This machine's timings drift by a third within an hour, so two runs of ``launch_overhead.py`` made
minutes apart do not compare two versions. Here each version runs in a kernel of its own (its
checkout first on ``PYTHONPATH``), both kernels alive together, their launches interleaved round
by round, and each version is measured against raw ``torch.multiprocessing`` fork in its own
kernel: a no-op on 2 CPU ranks, one launch per cell, with ``display="none"`` and the default
display (the widget). Medians, the median of each round's ratio to raw fork, and the difference
between the versions paired round by round, with its 95% interval: only a difference whose interval
leaves out 0 is one (a few hundred rounds tell ~0.5 ms apart here).

Run: .venv/bin/python bench/launch_versions.py OLD_CHECKOUT NEW_CHECKOUT [--rounds 30]
     (a checkout: a folder holding notebook_launcher/, e.g. from ``git worktree add``)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from statistics import median

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from intervals import bootstrap_interval
from kernel import BenchKernel

SETUP = r"""
import contextlib, io, json, time
import torch, torch.multiprocessing as torch_mp
import notebook_launcher as package
from notebook_launcher import notebook_launcher

def noop():
    pass

def raw_entry(index):
    pass

TIMES = {}

def measure(name):
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        if name == "raw fork":
            torch_mp.start_processes(raw_entry, nprocs=2, start_method="fork")
        else:
            notebook_launcher(noop, num_processes=2, start_method="fork", display=name)
    TIMES.setdefault(name, []).append(time.perf_counter() - start)
"""

RUNNERS = ("raw fork", "none", "auto")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path, help="a checkout of the version to compare against")
    parser.add_argument("new", type=Path, help="a checkout of the version measured")
    parser.add_argument("--rounds", type=int, default=30)
    options = parser.parse_args()
    for checkout in (options.old, options.new):
        if not (checkout / "notebook_launcher" / "__init__.py").exists():
            parser.error(f"{checkout} holds no notebook_launcher/ package")
    kernels = {label: _kernel_on(path) for label, path in (("old", options.old), ("new", options.new))}
    try:
        for label, kernel in kernels.items():
            kernel.run(SETUP)
            where = kernel.run("print(package.__file__)").strip()
            assert where.startswith(str(getattr(options, label).resolve())), f"{label} imported {where}"
            for name in RUNNERS:  # warm-up: first-time imports are not launch overhead
                kernel.run(f"measure({name!r})")
            kernel.run("TIMES.clear()")
        for round_ in range(options.rounds):
            order = list(kernels) if round_ % 2 == 0 else list(kernels)[::-1]
            names = RUNNERS if round_ % 2 == 0 else RUNNERS[::-1]
            for label in order:
                for name in names:
                    kernels[label].run(f"measure({name!r})")
        times = {label: json.loads(kernel.run("print(json.dumps(TIMES))")) for label, kernel in kernels.items()}
    finally:
        for kernel in kernels.values():
            kernel.close()
    report(times, options.rounds)


def _kernel_on(checkout: Path) -> BenchKernel:
    previous = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(checkout.resolve()), previous]))
    try:
        return BenchKernel()
    finally:
        if previous is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = previous


def report(times: dict, rounds: int) -> None:
    print(f"\nNo-op launch on 2 CPU ranks, two kernels interleaved, {rounds} rounds (medians)\n")
    ratios = f"{'vs raw':>7} {'paired':>7}"
    print(f"{'version':8} {'raw fork':>9} {'none':>8} {ratios} {'widget':>8} {ratios}")
    for label, runs in times.items():
        raw = runs["raw fork"]
        cells = [f"{median(raw) * 1000:7.1f}ms"]
        for name in ("none", "auto"):
            ratio = median(runs[name]) / median(raw)
            paired = median(a / b for a, b in zip(runs[name], raw, strict=True))
            cells.append(f"{median(runs[name]) * 1000:6.1f}ms {ratio:6.2f}x {paired:6.2f}x")
        print(f"{label:8} " + " ".join(cells))
    print()
    for name, shown in (("none", "display none"), ("auto", "widget")):
        middle, low, high = _paired_difference(times["old"][name], times["new"][name])
        interval = f"95% interval {low:+.2f} to {high:+.2f} ms"
        print(f"{shown:12} new - old, paired round by round: {middle:+.2f} ms ({interval})")


def _paired_difference(old: list, new: list) -> tuple[float, float, float]:
    """The median of each round's new - old time (ms) and its 95% interval. A difference whose
    interval holds 0 is not one: here one launch in ten takes a third longer than the median, and a
    150-round comparison cannot tell 1 ms apart (a change first seen as -1 ms measured +0.2 ms,
    interval -0.1 to +0.4, over 2000 paired rounds)."""
    differences = [(after - before) * 1000 for before, after in zip(old, new, strict=True)]
    return (median(differences), *bootstrap_interval(differences, median))


if __name__ == "__main__":
    main()
