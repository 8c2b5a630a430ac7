"""Cost of showing a chatty rank: 100k printed lines during a compute loop, in a real kernel.

The rank times its own loop (so launch cost is excluded); variants are interleaved round by round,
medians reported. "none" still captures every line (Launch.logs); "text" prints them in the cell;
"widget" renders the live widget, throttled to ≤ 10 updates a second.

Target (issue #4): the widget slows the training by no more than a few percent.

Run: .venv/bin/python bench/log_overhead.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import sys
from statistics import median

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from intervals import decided, ratio_of_medians
from kernel import run_rounds

SETUP = r"""
import json, statistics, time, torch
from notebook_launcher import launch

def chatty_training(lines, steps=200):
    a = torch.randn(384, 384)
    per_step = lines // steps
    start = time.perf_counter()
    for step in range(steps):
        for _ in range(6):
            a = torch.tanh(a @ a)
        for i in range(per_step):
            print(f"step {step} line {i}: loss {a[0, 0].item():.4f}")
    return time.perf_counter() - start

VARIANTS = {"no printing": (0, "none"), "100k lines, display=none": (100_000, "none"),
            "100k lines, display=text": (100_000, "text"), "100k lines, display=widget": (100_000, "widget")}
TIMES = {name: [] for name in VARIANTS}
RENDERS = []
launch(chatty_training, args=(1000,), num_processes=1, display="none").wait()   # warm-up
"""

ROUND = r"""
for name, (lines, display) in VARIANTS.items():
    job = launch(chatty_training, args=(lines,), num_processes=1, display=display)
    TIMES[name].append(job.wait())
    if display == "widget":
        RENDERS.append(job._view.renders / job.elapsed)
"""

REPORT = r"""
print(json.dumps({"times": TIMES, "renders": RENDERS}))
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    data = run_rounds(SETUP, ROUND, REPORT, args.rounds, round_timeout=900)
    medians = {name: median(values) for name, values in data["times"].items()}
    base, quiet = medians["no printing"], medians["100k lines, display=none"]
    print(f"\nA rank printing 100k lines during 200 compute steps, time inside the rank, median of {args.rounds}\n")
    print(f"{'variant':<30} {'seconds':>8} {'vs no printing':>15} {'vs display=none':>16}")
    for name, value in medians.items():
        print(f"{name:<30} {value:>8.2f} {value / base:>14.3f}x {value / quiet:>15.3f}x")
    renders = median(data["renders"])
    print(f"\nwidget updates per second (median): {renders:.1f}")
    runs = data["times"]
    ratio = ratio_of_medians(runs["100k lines, display=widget"], runs["100k lines, display=none"])
    print(f"target: widget ≤ 1.05 × capturing alone: {decided(*ratio, 1.05)}")


if __name__ == "__main__":
    main()
