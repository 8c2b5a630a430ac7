"""The live widget's buttons while ``notebook_launcher()`` blocks its cell (the common case), in a
real JupyterLab and Notebook 7 driven in Chromium: Stacks, Log as text, Save log and Stop answer at
once, because the front end sends widget messages to a kernel subshell and the launcher keeps its
buttons' messages there.

Screenshots are saved under test-artifacts/.
"""

from __future__ import annotations

import os
import re

import pytest
from browser import CHROMIUM, make_gates, notebook7_page, open_notebook, parked_launch, run_all, screenshot

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")


def test_every_button_answers_while_the_launch_blocks_its_cell(lab, browser):
    gates = make_gates(lab.root / "button-gates", "b")
    page = open_notebook(browser, lab, "buttons.ipynb", [parked_launch(gates, "b", lines=30)])
    run_all(page)
    page.locator(".nl-chip", has_text="rank 1: running").first.wait_for(timeout=120_000)
    page.locator(".nl-logbox", has_text="rank 1: step 29").first.wait_for(timeout=30_000)

    page.get_by_role("button", name="Stacks").click()
    stacks = page.locator(".nl-stacks", has_text="in chatty_then_parked").first
    stacks.wait_for(timeout=30_000)
    assert "rank 0 (pid " in stacks.inner_text() and "rank 1 (pid " in stacks.inner_text()
    screenshot(stacks, "stacks.png")

    page.get_by_role("button", name="Log as text").click()
    text = page.locator(".jupyter-widgets textarea").first
    text.wait_for(timeout=30_000)
    assert "[rank 0] rank 0: step 29" in text.input_value() and "[rank 1] rank 1: step 29" in text.input_value()

    page.get_by_role("button", name="Save log").click()
    link = page.locator(".jupyter-widgets a", has_text=re.compile(r"notebook_launcher-\w+\.log")).first
    link.wait_for(timeout=30_000)
    saved = (lab.root / link.inner_text()).read_text()
    assert f"in {lab.root}" in page.locator(".widget-html", has_text="saved notebook_launcher-").first.inner_text()
    assert saved.count("[rank 0] rank 0: step") == 30 and saved.count("[rank 1] rank 1: step") == 30

    page.get_by_role("button", name="Stop").click()
    error = page.locator(".jp-OutputArea-output", has_text="was stopped by its Stop button").first
    error.wait_for(timeout=60_000)
    shown = error.inner_text()
    assert "rank 0: in chatty_then_parked" in shown and "rank 1: in chatty_then_parked" in shown
    assert "handle.py" not in shown and "Traceback" not in shown  # one message, nothing of the launcher's
    screenshot(page.locator(".jp-Cell", has=error).first, "stopped-by-button.png")
    page.close()


def test_notebook_7_takes_the_stop_button_during_a_blocking_launch(lab, browser):
    gates = make_gates(lab.root / "stop7-gates", "s")
    open_notebook(browser, lab, "stop7.ipynb", [parked_launch(gates, "s", lines=3)]).close()
    with notebook7_page(browser, lab.root, "stop7.ipynb") as page:
        page.get_by_text("# loaded").first.wait_for(timeout=60_000)
        page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").first.wait_for(
            state="attached", timeout=90_000
        )
        run_all(page)
        page.locator(".nl-chip", has_text="rank 1: running").first.wait_for(timeout=120_000)
        page.get_by_role("button", name="Stop").click()
        page.locator(".jp-OutputArea-output", has_text="was stopped by its Stop button").first.wait_for(timeout=60_000)


def test_a_finished_launch_still_offers_its_log_as_a_download(lab, browser):
    cell = (
        "from notebook_launcher import notebook_launcher\n"
        "def talks():\n    import os\n    for i in range(5):\n        print('line', i, 'of rank', os.environ['RANK'])\n"
        "notebook_launcher(talks, num_processes=2)"
    )
    page = open_notebook(browser, lab, "download.ipynb", [cell])
    run_all(page)
    link = page.locator(".nl-static .nl-summary a.nl-download").first
    link.wait_for(timeout=120_000)
    assert link.inner_text() == "download the log (10 lines)"
    with page.expect_download(timeout=30_000) as download:
        link.click()
    text = download.value.path().read_text(encoding="utf-8")
    assert download.value.suggested_filename.startswith("notebook_launcher-")
    assert [line for line in text.splitlines() if line.startswith("[rank 1]")] == [
        f"[rank 1] line {i} of rank 1" for i in range(5)
    ]
    page.close()
