"""What a collaborator sees of a launch: JupyterLab with real-time collaboration
(jupyter-collaboration, in the environment of the nox session ``collaboration``), two people (two
browser contexts) on one notebook, one of them running the launch.

The collaborator's page holds the output, but not as trusted, so it cannot draw the widget: it
shows the launch's latest static form, refreshed from the server as the launch runs (a new form
about every second, each at most a few seconds old: once ~10 s steps, 2 to 13 s behind), its logs
open on their newest lines and its chips apart, then the final form. Screenshots are saved under
test-artifacts/.
"""

from __future__ import annotations

import itertools
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


# Every new form the collaborator's page shows: [when (ms, the machine's clock), how old it was then
# (ms since its "as of HH:MM:SS", which is cut to the second, so up to 1 s more than its age)].
RECORD_UPDATES = """() => {
    window.nlUpdates = [];
    let last = '';
    new MutationObserver(() => {
        const text = document.querySelector('.nl-live-launch')?.innerText ?? '';
        const asOf = / as of ([0-9]{2}):([0-9]{2}):([0-9]{2})/.exec(text);
        if (!asOf || text === last) return;
        last = text;
        const made = new Date();
        made.setHours(+asOf[1], +asOf[2], +asOf[3], 0);
        window.nlUpdates.push([Date.now(), Date.now() - made.getTime()]);
    }).observe(document.body, {subtree: true, childList: true, characterData: true});
}"""

# Whether the newest line of each rank's log box is in view in that box, and the oldest is not (where
# each line's text is drawn: a Range around it, as the reader sees it).
NEWEST_IN_VIEW = """() => [...document.querySelectorAll('.nl-live-launch .nl-static-log')].map(box => {
    const frame = box.getBoundingClientRect();
    const seen = (text) => {
        const walker = document.createTreeWalker(box, NodeFilter.SHOW_TEXT);
        for (let node = walker.nextNode(); node; node = walker.nextNode()) {
            const at = node.data.indexOf(text);
            if (at < 0) continue;
            const range = document.createRange();
            range.setStart(node, at);
            range.setEnd(node, at + text.length);
            const r = range.getBoundingClientRect();
            return r.bottom > frame.top && r.top < frame.bottom;
        }
        return false;
    };
    return {newest: seen('step 199'), oldest: seen('step 0\\n')};
})"""


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
    runner = open_notebook(browser, lab, "together.ipynb", [parked_launch(gates, "c", lines=200)])
    other = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    other.goto(lab.url("/lab/tree/together.ipynb"))
    other.get_by_text("# loaded").first.wait_for(timeout=60_000)
    assert "Initializing room" in (lab.root / "lab.log").read_text()  # the notebook is shared in real time

    run_all(runner)
    runner.locator(".nl-logbox", has_text="rank 1: step 199").first.wait_for(timeout=120_000)
    shown = other.locator(".nl-live-launch")
    other.evaluate(RECORD_UPDATES)
    shown.get_by_text("rank 1: step 199").first.wait_for(timeout=60_000)
    other.wait_for_function(f"() => ({RUN_SECONDS})('.nl-live-launch') >= 2", timeout=60_000)
    first = other.evaluate(RUN_SECONDS, ".nl-live-launch")
    other.wait_for_function(f"() => ({RUN_SECONDS})('.nl-live-launch') > {first}", timeout=60_000)
    assert re.search(r"rank 0: running\s*rank 1: running", shown.first.inner_text())
    other.wait_for_function("() => window.nlUpdates.length >= 6", timeout=60_000)
    updates = other.evaluate("() => window.nlUpdates")
    gaps = [later[0] - earlier[0] for earlier, later in itertools.pairwise(updates)]
    ages = [age for _, age in updates]
    print(f"collaborator: gaps between forms {gaps} ms, their ages when shown {ages} ms")
    assert max(gaps) <= 3000 and max(ages) <= 3500, (gaps, ages)  # about 1 s apart, each about 1 s old
    boxes = other.evaluate(NEWEST_IN_VIEW)
    assert len(boxes) == 2 and all(box["newest"] and not box["oldest"] for box in boxes), boxes
    chips = [other.locator(".nl-live-launch .nl-chip").nth(index).bounding_box() for index in (0, 1)]
    assert chips[1]["x"] - (chips[0]["x"] + chips[0]["width"]) >= 4, chips  # apart, not run together
    screenshot(shown.first, "collaborator.png")

    release_gates(gates, "c")
    other.get_by_text(re.compile(r"· succeeded in [0-9.]+ s")).first.wait_for(timeout=60_000)
    assert "· running ·" not in other.locator(".jp-OutputArea-output").last.inner_text()
    runner.close()
    other.close()
