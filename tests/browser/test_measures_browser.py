"""What a person sees of the built-in measures in a real JupyterLab in Chromium: a slow rank's chip
and the line that says why, the charts of the ranks' pace, CPU and memory with their numbers, and a
line every rank printed shown once in "all ranks"; then the finished form keeps them.

Screenshots are saved under test-artifacts/.
"""

from __future__ import annotations

import os

import pytest
from browser import CHROMIUM, VISIBLE_PANES, contrasts, open_notebook, run_all, screenshot

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")

SLOW_RANK = """
import os, time
import torch, torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset
from notebook_launcher import notebook_launcher
from trainer_core import Accelerator
def one_slow_rank(release):
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = DataLoader(TensorDataset(torch.randn(80_000, 16)), batch_size=4)
    model, optimizer, data = accelerator.prepare(model, optimizer, data)
    accelerator.wait_for_everyone()
    print("warming up")
    for (batch,) in data:
        if accelerator.process_index == 1:
            time.sleep(0.03)   # its own work is slower: rank 0 waits for it in backward()
        accelerator.backward(model(batch).pow(2).mean())
        optimizer.step()
        optimizer.zero_grad()
        done = torch.tensor([float(os.path.exists(release))])
        dist.all_reduce(done, op=dist.ReduceOp.MAX)   # every rank stops at the same step
        if done.item():
            break
notebook_launcher(one_slow_rank, args=({release!r},), num_processes=2)
"""


def test_a_slow_rank_its_charts_and_a_line_every_rank_said_read_as_such(lab, browser):
    release = lab.root / "measures-release"
    page = open_notebook(browser, lab, "measures.ipynb", [SLOW_RANK.format(release=str(release))])
    run_all(page)
    slow_chip = page.locator(".nl-root .nl-chip", has_text="rank 1: running · slow").first
    slow_chip.wait_for(state="visible", timeout=120_000)
    why = page.locator(".nl-root .nl-stragglers").first
    assert why.is_visible() and "rank 1 is slow: work time" in why.inner_text()
    assert not page.locator(".nl-root .nl-chip", has_text="rank 0: running · slow").count()
    chips = contrasts(page, ".nl-root .nl-chip")
    assert {c["text"] for c in chips} == {"rank 0: running", "rank 1: running · slow"}
    assert all(c["ratio"] >= 4.5 for c in chips), chips

    panes = page.evaluate(VISIBLE_PANES)
    assert len(panes) == 1 and panes[0].count("warming up") == 1 and "[ranks 0, 1] warming up" in panes[0]
    for key in ("work time ms", "samples/s", "CPU %", "RSS MB"):
        chart = page.locator(f'.nl-root .nl-chart[data-key="{key}"]').first
        chart.wait_for(state="visible", timeout=60_000)
        assert chart.locator("polyline, circle").count() >= 1, key  # values drawn, not an empty frame
        text = chart.inner_text()
        per_rank = f"latest {key}: rank 0:" in text and "rank 1:" in text
        # ranks whose whole series are equal (a CPU % sampled twice, say) are drawn as one line, "all ranks"
        assert per_rank or (key != "work time ms" and f"latest {key}: all ranks:" in text), (key, text)
    cpu = page.locator('.nl-root .nl-chart[data-key="CPU %"]').first
    assert "by second" in cpu.inner_text()
    screenshot(page.locator(".jp-OutputArea-output", has=page.locator(".nl-logbox")).first, "live-measures.png")

    release.touch()
    final = page.locator(".nl-static .nl-summary", has_text="succeeded in").first
    final.wait_for(timeout=120_000)
    static = page.locator(".jp-OutputArea-output", has=page.locator(".nl-static")).first
    assert "rank 1: done · slow" in static.inner_text() and "rank 1 is slow: work time" in static.inner_text()
    images = static.locator("img.nl-chart-image")
    alts = [images.nth(index).get_attribute("alt") for index in range(images.count())]
    assert any(alt.startswith("CPU % from") and "seconds" in alt for alt in alts), alts
    assert any(alt.startswith("work time ms from") and "steps" in alt for alt in alts), alts
    screenshot(static, "finished-measures.png")
    page.close()
