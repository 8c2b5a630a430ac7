"""The output path and the launch path, side by side with Hugging Face Accelerate's notebook_launcher.

In real Jupyter kernels (the default display, as a user gets it):

1. per captured line inside a rank: ``print`` to the captured stdout vs ``print`` to /dev/null;
2. 2 ranks each printing 20,000 lines: wall time of the launch;
3. launch overhead of a no-op function on 2 ranks (call → return; in a kernel of its own that has
   imported torch and Accelerate, beside raw ``torch.multiprocessing`` fork);
4. the first launch in a fresh kernel (torch imported, a function that builds an Adam optimizer),
   made a few seconds after the import, and the second launch.

Targets (issue #10): (1) ≤ 1.3× printing to /dev/null; (3) ≤ 0.2× Accelerate with the default
display; (4) first launch ≤ 0.3 s.

Run: .venv/bin/python bench/output_path.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from statistics import median

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from intervals import decided, median_of, ratio_of_medians
from kernel import BenchKernel, run_rounds

SETUP = r"""
import contextlib, io, json, os, statistics, sys, time
import torch
from notebook_launcher import notebook_launcher, launch
from accelerate import notebook_launcher as accelerate_launcher

RESULT = os.path.join(os.getcwd(), ".bench-per-line.json")

def per_line_cost(n):
    start = time.perf_counter()
    for i in range(n):
        print(f"step {i}: loss {0.1234:.4f}")
    captured = time.perf_counter() - start
    with open(os.devnull, "w") as null:
        start = time.perf_counter()
        for i in range(n):
            print(f"step {i}: loss {0.1234:.4f}", file=null)
        devnull = time.perf_counter() - start
    sys.stdout.flush()
    if os.environ.get("RANK", "0") == "0":
        with open(RESULT, "w") as f:
            f.write(json.dumps([captured / n, devnull / n]))

def twenty_thousand_lines():
    for i in range(20_000):
        print(f"line {i}: loss {0.1234:.4f}")

def noop():
    pass

def timed(run):   # the cell's output goes where a user's goes: into the cell
    start = time.perf_counter()
    run()
    return time.perf_counter() - start

def read_result():
    with open(RESULT) as f:
        return json.loads(f.read())

OURS, THEIRS = notebook_launcher, accelerate_launcher
RUNNERS = {   # Accelerate's ranks write each line to the cell through ipykernel: fewer lines there
    "per line: notebook_launcher (100k lines)": lambda: OURS(per_line_cost, args=(100_000,), num_processes=1),
    "per line: accelerate (10k lines)": lambda: THEIRS(per_line_cost, args=(10_000,), num_processes=1),
}
WALL = {
    "20k lines x 2 ranks: notebook_launcher": lambda: OURS(twenty_thousand_lines, num_processes=2),
    "20k lines x 2 ranks: notebook_launcher text": lambda: OURS(twenty_thousand_lines, num_processes=2, display="text"),
    "20k lines x 2 ranks: accelerate": lambda: THEIRS(twenty_thousand_lines, num_processes=2),
}
PER_LINE = {name: [] for name in RUNNERS}
TIMES = {name: [] for name in WALL}
for run in list(RUNNERS.values()) + list(WALL.values()):   # warm-up: first-time imports are not overhead
    timed(run)
"""

ROUND = r"""
for name, run in RUNNERS.items():
    timed(run)
    PER_LINE[name].append(read_result())
for name, run in WALL.items():
    TIMES[name].append(timed(run))
"""

REPORT = r"""
print(json.dumps({"per_line": PER_LINE, "times": TIMES}))
"""

OVERHEAD_SETUP = r"""
import contextlib, io, json, statistics, time
import torch, torch.multiprocessing as torch_mp
from notebook_launcher import notebook_launcher
from accelerate import notebook_launcher as accelerate_launcher

def noop(*args):
    pass

def timed(run):
    with contextlib.redirect_stdout(io.StringIO()):
        start = time.perf_counter()
        run()
        return time.perf_counter() - start

OVERHEAD = {
    "no-op launch: notebook_launcher (default display)": lambda: notebook_launcher(noop, num_processes=2),
    "no-op launch: notebook_launcher (display=none)": lambda: notebook_launcher(noop, num_processes=2, display="none"),
    "no-op launch: raw torch.multiprocessing fork": lambda: torch_mp.start_processes(
        noop, nprocs=2, start_method="fork"
    ),
    "no-op launch: accelerate": lambda: accelerate_launcher(noop, num_processes=2),
}
OVERHEAD_TIMES = {name: [] for name in OVERHEAD}
for run in OVERHEAD.values():
    timed(run)
"""
OVERHEAD_ROUND = r"""
for name, run in OVERHEAD.items():
    for _ in range(3):
        OVERHEAD_TIMES[name].append(timed(run))
"""
OVERHEAD_REPORT = r"""
print(json.dumps(OVERHEAD_TIMES))
"""

FIRST_LAUNCH = {
    "notebook_launcher": "from notebook_launcher import notebook_launcher as launcher",
    "accelerate": "from accelerate import notebook_launcher as launcher",
}
FIRST_SETUP = r"""
import contextlib, io, time, torch
{import_line}
def build_adam():
    model = torch.nn.Linear(16, 4)
    torch.optim.Adam(model.parameters(), lr=1e-3)
"""
TIMED = r"""
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    start = time.perf_counter(); launcher(build_adam, num_processes=2); print_later = time.perf_counter() - start
print(print_later)
"""


def first_launches(rounds, think_time):
    """Fresh kernel per round: import, a few seconds of a user reading the notebook, two launches."""
    results = {name: {"first": [], "second": []} for name in FIRST_LAUNCH}
    for _ in range(rounds):
        for name, import_line in FIRST_LAUNCH.items():
            kernel = BenchKernel()
            try:
                kernel.run(FIRST_SETUP.format(import_line=import_line))
                time.sleep(think_time)  # the user, between the import cell and the launch cell
                results[name]["first"].append(float(kernel.run(TIMED).strip().splitlines()[-1]))
                results[name]["second"].append(float(kernel.run(TIMED).strip().splitlines()[-1]))
            finally:
                kernel.close()
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--think-time", type=float, default=3.0)
    args = parser.parse_args()
    overhead_times = run_rounds(OVERHEAD_SETUP, OVERHEAD_ROUND, OVERHEAD_REPORT, args.rounds)
    data = run_rounds(SETUP, ROUND, REPORT, args.rounds, round_timeout=900)
    data["times"].update(overhead_times)
    firsts = first_launches(max(2, args.rounds // 2), args.think_time)
    os.remove(".bench-per-line.json") if os.path.exists(".bench-per-line.json") else None
    print(f"\nOutput and launch paths, 2 CPU processes, default display, medians of {args.rounds} interleaved rounds\n")
    print(f"{'per captured line, inside the rank':<48} {'print':>9} {'/dev/null':>10} {'ratio':>7}")
    ratios = {}
    for name, runs in data["per_line"].items():
        captured, null = median(r[0] for r in runs), median(r[1] for r in runs)
        ratios[name] = captured / null
        print(f"{name:<48} {captured * 1e6:>7.2f}µs {null * 1e6:>8.2f}µs {captured / null:>6.2f}x")
    times = {name: median(values) for name, values in data["times"].items()}
    print(f"\n{'wall time of the launch':<48} {'seconds':>9}")
    for name, value in times.items():
        print(f"{name:<48} {value:>9.3f}")
    print(f"\n{'fresh kernel, launch building Adam (2 ranks)':<48} {'first':>9} {'second':>9}")
    for name, runs in firsts.items():
        print(f"{name:<48} {median(runs['first']):>8.3f}s {median(runs['second']):>8.3f}s")
    lines = data["per_line"]["per line: notebook_launcher (100k lines)"]
    launches = data["times"]
    overhead = ratio_of_medians(
        launches["no-op launch: notebook_launcher (default display)"], launches["no-op launch: accelerate"]
    )
    print("\ntargets:")
    print(f"  captured print ≤ 1.3x /dev/null: {decided(*ratio_of_medians(*zip(*lines, strict=True)), 1.3)}")
    print(f"  launch overhead ≤ 0.2x Accelerate (default display): {decided(*overhead, 0.2)}")
    first = median_of(firsts["notebook_launcher"]["first"])
    print(f"  first launch in a fresh kernel ≤ 0.3 s: {decided(*first, 0.3, 's')}")
    print(json.dumps({"ratios": ratios, "times": times, "first": firsts}), file=sys.stderr)


if __name__ == "__main__":
    main()
