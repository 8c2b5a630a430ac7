"""What a collaborator sees of a launch: JupyterLab with real-time collaboration
(jupyter-collaboration, in the environment of the nox session ``collaboration``), two people (two
browser contexts) on one notebook, one of them running the launch.

The collaborator's page holds the output, but not as trusted, so it cannot draw the widget: it
shows the launch's latest static form, refreshed from the server as the launch runs, then the
final form. Screenshots are saved under test-artifacts/.
"""

from __future__ import annotations

import os
import re

import pytest
from browser import CHROMIUM, LabServer, make_gates, open_notebook, parked_launch, release_gates, run_all, screenshot
from paths import REPO

ROOT = REPO
RTC_PYTHON = os.environ.get("NL_TEST_RTC_PYTHON", "")  # the nox session "collaboration" makes it

pytestmark = [
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed"),
    pytest.mark.skipif(not os.path.exists(RTC_PYTHON), reason="no JupyterLab with collaboration: the nox session"),
]

# the seconds the collaborator's form says the launch has run ("running · 7.2 s · as of …")
RUN_SECONDS = """(selector) => {
    const found = /· running · ([0-9.]+) s/.exec(document.querySelector(selector)?.innerText ?? '');
    return found ? parseFloat(found[1]) : -1;
}"""


@pytest.fixture
def collaborative_lab(tmp_path):
    main = ROOT / ".venv"
    env = {"JUPYTER_PATH": str(main / "share" / "jupyter"), "JUPYTER_CONFIG_PATH": str(main / "etc" / "jupyter")}
    server = LabServer(tmp_path, python=RTC_PYTHON, env=env)
    yield server
    server.stop()


def test_a_collaborator_follows_a_running_launch_then_sees_how_it_ended(collaborative_lab, browser):
    lab = collaborative_lab
    gates = make_gates(lab.root / "gates", "c")
    runner = open_notebook(browser, lab, "together.ipynb", [parked_launch(gates, "c", lines=30)])
    other = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    other.goto(lab.url("/lab/tree/together.ipynb"))
    other.get_by_text("# loaded").first.wait_for(timeout=60_000)
    assert "Initializing room" in (lab.root / "lab.log").read_text()  # the notebook is shared in real time

    run_all(runner)
    runner.locator(".nl-logbox", has_text="rank 1: step 29").first.wait_for(timeout=120_000)
    shown = other.locator(".nl-live-launch")
    shown.get_by_text("rank 1: step 29").first.wait_for(timeout=60_000)
    other.wait_for_function(f"() => ({RUN_SECONDS})('.nl-live-launch') >= 2", timeout=60_000)
    first = other.evaluate(RUN_SECONDS, ".nl-live-launch")
    other.wait_for_function(f"() => ({RUN_SECONDS})('.nl-live-launch') > {first}", timeout=60_000)
    assert re.search(r"rank 0: running\s*rank 1: running", shown.first.inner_text())
    screenshot(shown.first, "collaborator.png")

    release_gates(gates, "c")
    other.get_by_text(re.compile(r"· succeeded in [0-9.]+ s")).first.wait_for(timeout=60_000)
    assert "· running ·" not in other.locator(".jp-OutputArea-output").last.inner_text()
    runner.close()
    other.close()
