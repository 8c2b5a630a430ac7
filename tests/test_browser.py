"""The widget in a real JupyterLab, in a real browser: Debian's Chromium driven by Playwright.

Screenshots are saved under test-artifacts/.
"""

from __future__ import annotations

import os

import pytest
from browser import CHROMIUM, open_notebook, run_all, screenshot

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")

TRAIN = """
from notebook_launcher import launch
def train():
    from trainer_core import Accelerator
    accelerator = Accelerator()
    for step in range(30):
        print(f"rank {accelerator.process_index}: step {step}")
        accelerator.log({"loss": 1.0 / (step + 1) + 0.1 * accelerator.process_index})
    return accelerator.process_index
job = launch(train, num_processes=2)
job.wait()
"""


def test_widget_renders_tabs_chips_and_chart_in_jupyterlab(lab, browser):
    page = open_notebook(browser, lab, "widget.ipynb", [TRAIN])
    run_all(page)
    summary = page.locator("text=succeeded in").first
    summary.wait_for(timeout=120_000)
    chips = page.locator(".nl-chip")
    assert chips.count() == 2
    assert chips.nth(0).inner_text() == "rank 0: done" and chips.nth(1).inner_text() == "rank 1: done"
    tabs = page.locator(".lm-TabBar-tabLabel", has_text="rank ")
    assert [tabs.nth(i).inner_text() for i in range(tabs.count())] == ["rank 0", "rank 1"]
    assert "rank 0: step 29" in page.locator(".nl-log").first.inner_text()
    tabs.nth(1).click()
    page.locator(".nl-log", has_text="rank 1: step 29").first.wait_for(timeout=10_000)
    follows = page.evaluate("""() => [...document.querySelectorAll('.nl-log')].filter(e => e.clientHeight > 0)
        .map(e => [e.scrollHeight > e.clientHeight,
                   e.firstElementChild.getBoundingClientRect().bottom <= e.getBoundingClientRect().bottom + 1])""")
    assert follows == [[True, True]]  # the box overflows, and its newest line is in view
    assert page.locator("svg polyline.nl-line").count() == 2
    screenshot(page.locator(".jp-OutputArea-output", has=page.locator(".nl-chip")).first, "widget.png")
    page.close()
