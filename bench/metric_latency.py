"""How long a metric takes from a rank to the page: a rank's ``accelerator.log()`` until the live
widget in a real JupyterLab page (Chromium, Playwright) shows the value.

Two CPU ranks log a counter every ``--every`` seconds (0.5 by default) for ``--count`` values, each
with the wall-clock time it was logged (kept by rank 0 in a file); the page records, with a
``MutationObserver`` on the chart's "latest" line, when each value first shows. Both clocks are the
machine's, so the difference is the latency: the rank's pipe, the kernel's supervisor, the widget's
redraw (at most every 0.1 s), the comm message and the browser's drawing. A value that two redraws
apart never showed alone (two came in one redraw) counts under "values not seen alone".

Target (issue 57): ≤ 1 s from the rank to the page. Accelerate's ``notebook_launcher`` and raw
``torch.multiprocessing`` have no live metrics view to compare with: their ranks' prints reach the
cell, nothing charts them.

Run: .venv/bin/python bench/metric_latency.py [--count 40] [--every 0.5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from browser import CHROMIUM, CHROMIUM_ARGS, LabServer, open_notebook, run_all

STAMPED = """
import json, time
from notebook_launcher import notebook_launcher
from trainer_core import Accelerator
def stamped(count, every, sent_file):
    accelerator = Accelerator(cpu=True)
    sent = {{}}
    for value in range(count):
        accelerator.wait_for_everyone()  # both ranks log each value together
        sent[value] = time.time() * 1000.0
        accelerator.log({{"counter": value}}, step=value)
        time.sleep(every)
    if accelerator.is_main_process:
        with open(sent_file, "w") as out:
            json.dump(sent, out)
notebook_launcher(stamped, args=({count}, {every}, {sent_file!r}), num_processes=2)
"""

# When each value of the counter chart's latest line first shows (Date.now(), the machine's clock).
OBSERVE = """() => {
    window.nlSeen = {};
    const look = () => {
        const chart = document.querySelector('.nl-root .nl-chart[data-key="counter"]');
        const found = chart && chart.innerText.match(/latest counter: [^:]+: (\\d+)/);
        if (found && !(found[1] in window.nlSeen)) window.nlSeen[found[1]] = Date.now();
    };
    new MutationObserver(look).observe(document.body, {subtree: true, childList: true, characterData: true});
}"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=40)
    parser.add_argument("--every", type=float, default=0.5)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    root = Path(tempfile.mkdtemp(prefix="metric-latency-bench-"))
    sent_file = root / "sent.json"
    lab = LabServer(root)
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            cell = STAMPED.format(count=args.count, every=args.every, sent_file=str(sent_file))
            page = open_notebook(browser, lab, "latency.ipynb", [cell])
            page.evaluate(OBSERVE)
            run_all(page)
            page.locator(".nl-static .nl-summary", has_text="succeeded in").first.wait_for(
                timeout=int((args.count * args.every + 120) * 1000)
            )
            seen = page.evaluate("() => window.nlSeen")
            browser.close()
    finally:
        lab.stop()
    sent = json.loads(sent_file.read_text())
    latencies = sorted(seen[value] - sent[value] for value in seen if value in sent)
    quantile = statistics.quantiles(latencies, n=20) if len(latencies) > 1 else latencies * 19
    print(f"\n2 CPU ranks, a value every {args.every} s, {args.count} values; one JupyterLab page in Chromium")
    print(f"{'launcher':<28} {'median ms':>10} {'p95 ms':>8} {'max ms':>8} {'values not seen alone':>22}")
    print(
        f"{'notebook_launcher':<28} {statistics.median(latencies):>10.0f} {quantile[18]:>8.0f}"
        f" {max(latencies):>8.0f} {args.count - len(latencies):>22}"
    )
    print(f"{'Accelerate / raw fork':<28} {'(no live metrics view)':>50}")


if __name__ == "__main__":
    main()
