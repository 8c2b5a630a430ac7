"""What a flood of rank output costs the page that shows it, measured in a real browser.

8 ranks each print 200 lines a second for ``--seconds`` (60 by default) in a cell of a real
JupyterLab, drawn by Debian's Chromium (Playwright). The page records every main-thread task over
50 ms (a ``PerformanceObserver`` for long tasks) from the cell's start to its end; then the
notebook is saved and its size read. Side by side, the same function launched by notebook_launcher
(its live widget, then the static form), by Hugging Face Accelerate's ``notebook_launcher`` and by
raw ``torch.multiprocessing.start_processes`` (fork): both of those print every line into the cell.

Targets (issue 45): no main-thread task over 100 ms, and a saved launch of that size ≤ 1 MB with
every line still retrievable (``logs(rank)``).

Run: .venv/bin/python bench/live_view.py [--seconds 60] [--only notebook_launcher]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from browser import CHROMIUM, CHROMIUM_ARGS, LabServer, open_notebook, run_all
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

FLOOD = """
import os, time
def flood(seconds={seconds}, per_second=200):
    rank = os.environ.get("RANK", "0")
    start = time.monotonic()
    for step in range(int(seconds * per_second)):
        print(f"rank {{rank}}: step {{step}} loss 0.{{step:05d}}", flush=True)
        time.sleep(max(0.0, start + (step + 1) / per_second - time.monotonic()))
def raw_entry(index):
    os.environ["RANK"] = str(index)
    flood()
"""

RUNNERS = {
    "notebook_launcher": "from notebook_launcher import notebook_launcher\nnotebook_launcher(flood, num_processes=8)",
    "accelerate notebook_launcher": (
        "from accelerate import notebook_launcher as accelerate_launcher\naccelerate_launcher(flood, num_processes=8)"
    ),
    "torch.multiprocessing fork": (
        "import torch.multiprocessing as torch_mp\ntorch_mp.start_processes(raw_entry, nprocs=8, start_method='fork')"
    ),
}

OBSERVE = """() => {
    window.nlLongTasks = [];
    window.nlEnded = null;  // when the launch's final form appeared (notebook_launcher only)
    new PerformanceObserver(list => {
        for (const entry of list.getEntries()) window.nlLongTasks.push([entry.startTime, entry.duration]);
    }).observe({type: 'longtask', buffered: false});
    new MutationObserver(() => {
        const ended = document.querySelector('.nl-static .nl-summary');
        if (window.nlEnded === null && ended) window.nlEnded = performance.now();
    }).observe(document.body, {subtree: true, childList: true});
}"""


def measure(browser, lab, name: str, cell: str, seconds: float) -> dict:
    notebook = re.sub(r"\W+", "-", name) + ".ipynb"
    page = open_notebook(browser, lab, notebook, [FLOOD.format(seconds=seconds), cell])
    page.evaluate(OBSERVE)
    began = time.monotonic()
    run_all(page)
    limit = seconds * 4 + 120
    try:
        page.locator(".jp-InputPrompt", has_text="[3]").first.wait_for(timeout=int(limit * 1000))
        took: float | None = time.monotonic() - began
    except PlaywrightTimeoutError:  # the page had not caught up with the output: measured as it stands
        took = None
        page.locator(".jp-Notebook").first.click()
        page.keyboard.press("i")
        page.keyboard.press("i")  # interrupt the kernel, so the notebook can be saved
    timed = page.evaluate("() => window.nlLongTasks")
    ended = page.evaluate("() => window.nlEnded")
    tasks = [duration for _, duration in timed]
    # a task that starts within 2 s before the final form appears draws (or makes way for) that form
    at_end = [duration for start, duration in timed if ended is not None and ended - 2000 <= start <= ended + 500]
    page.keyboard.press("Control+s")
    page.wait_for_function("() => !document.querySelector('.jp-mod-dirty')", timeout=60_000)
    size = (lab.root / notebook).stat().st_size
    page.close()
    return {
        "cell_s": took,
        "over_50": len(tasks),
        "over_100": sum(1 for t in tasks if t > 100),
        "longest_ms": max(tasks, default=0.0),
        "longest_at_end_ms": max(at_end, default=0.0),
        "saved_kb": size / 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--only", choices=sorted(RUNNERS), action="append")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    root = Path(tempfile.mkdtemp(prefix="live-view-bench-"))
    lab = LabServer(root)
    results = {}
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            for name, cell in RUNNERS.items():
                if args.only and name not in args.only:
                    continue
                results[name] = measure(browser, lab, name, cell, args.seconds)
                print(f"{name}: {json.dumps(results[name])}", file=sys.stderr)
            browser.close()
    finally:
        lab.stop()
    lines = int(8 * 200 * args.seconds)
    print(f"\n8 ranks x 200 lines/s for {args.seconds:.0f} s ({lines:,} lines), one JupyterLab page in Chromium")
    print(
        f"{'launcher':<30} {'cell s':>7} {'tasks>50ms':>10} {'>100ms':>7} {'longest ms':>11}"
        f" {'at end ms':>10} {'saved KB':>9}"
    )
    for name, r in results.items():
        cell = f"{r['cell_s']:>7.1f}" if r["cell_s"] is not None else f"{'>' + str(int(args.seconds * 4 + 120)):>7}"
        print(
            f"{name:<30} {cell} {r['over_50']:>10} {r['over_100']:>7}"
            f" {r['longest_ms']:>11.0f} {r['longest_at_end_ms']:>10.0f} {r['saved_kb']:>9.0f}"
        )
    print(
        "(cell s: from Run All to the cell's end; '>' where the page had not caught up with the output by then;"
        " at end: the longest task from 2 s before the final form appeared)"
    )
    ours = results.get("notebook_launcher")
    if ours:
        met = ours["over_100"] == 0 and ours["saved_kb"] <= 1024
        print(
            f"\ntarget: no task over 100 ms and a saved launch <= 1 MB: {'met' if met else 'NOT met'}"
            f" ({ours['over_100']} tasks over 100 ms, longest {ours['longest_ms']:.0f} ms; {ours['saved_kb']:.0f} KB)"
        )


if __name__ == "__main__":
    main()
