"""The live charts' controls as a person uses them in a real JupyterLab in Chromium: the ranks'
lines and their mean, the smoothing turned off from its drop-down, the x axis switched to time, and
outliers clipped from the scale with the box; each change redraws the charts while the launch runs.

Screenshots are saved under test-artifacts/.
"""

from __future__ import annotations

import os

import pytest
from browser import CHROMIUM, make_gates, open_notebook, release_gates, run_all, screenshot

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")

SPIKY_THEN_PARKED = """
import os
from notebook_launcher import notebook_launcher
from trainer_core import Accelerator
def spiky_then_parked():
    accelerator = Accelerator(cpu=True)
    for step in range(60):
        loss = 1.0 + 1.0 / (step + 1) + accelerator.process_index
        accelerator.log({{"loss": 500.0 if step == 30 else loss}}, step=step)   # one spike
    with open(os.path.join({gates!r}, "charts" + os.environ["RANK"])) as gate:   # a FIFO the test opens
        gate.read()
notebook_launcher(spiky_then_parked, num_processes=2)
"""


def test_the_chart_controls_redraw_the_live_charts(lab, browser):
    gates = make_gates(lab.root / "chart-gates", "charts")
    page = open_notebook(browser, lab, "charts.ipynb", [SPIKY_THEN_PARKED.format(gates=str(gates))])
    run_all(page)
    chart = page.locator('.nl-root .nl-chart[data-key="loss"]').first
    page.locator('.nl-root .nl-chart[data-key="loss"] polyline.nl-mean').first.wait_for(timeout=120_000)
    page.wait_for_function(
        """() => document.querySelector('.nl-root .nl-chart[data-key="loss"]').innerText.includes('rank 1: 2.02')""",
        timeout=60_000,
    )
    legend = chart.locator(".nl-legend").inner_text()
    assert "rank 0" in legend and "rank 1" in legend and "mean" in legend, legend
    assert chart.locator("polyline.nl-smoothed").count() >= 3  # smoothed by default (0.6)
    assert chart.get_attribute("data-scale") == "log"  # the spike spans the decades
    screenshot(page.locator(".jp-OutputArea-output", has=page.locator(".nl-root")).first, "charts-default.png")

    controls = page.locator(".nl-root .nl-chart-controls").first
    controls.locator("select").select_option(label="off")
    page.locator('.nl-root .nl-chart[data-key="loss"] polyline.nl-smoothed').first.wait_for(
        state="detached", timeout=30_000
    )
    assert chart.locator("polyline.nl-line").count() == 3  # the raw lines alone: two ranks and the mean

    controls.get_by_role("button", name="time").click()
    page.locator('.nl-root .nl-chart[data-key="loss"]', has_text="by second").first.wait_for(timeout=30_000)

    controls.get_by_role("checkbox", name="clip outliers").check()
    page.locator('.nl-root .nl-chart[data-key="loss"]', has_text="outliers clipped").first.wait_for(timeout=30_000)
    assert chart.get_attribute("data-scale") == "linear"  # the spike no longer sets the scale
    screenshot(page.locator(".jp-OutputArea-output", has=page.locator(".nl-root")).first, "charts-controlled.png")

    release_gates(gates, "charts")
    page.locator(".nl-static .nl-summary", has_text="succeeded in").first.wait_for(timeout=120_000)
    page.close()
