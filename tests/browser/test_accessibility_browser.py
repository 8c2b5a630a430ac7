"""The live widget and the saved forms as axe-core judges them in a real JupyterLab in Chromium:
no serious or critical violation (log boxes the keyboard reaches, named charts and controls, tab
panels tied to their tabs), a focus ring that stands out at 3:1 on light and dark themes, and chips
that read at 4.5:1 in a saved copy opened untrusted (no stylesheet) in the light theme.

axe-core comes from the lab extension's node modules (a dev dependency), injected into the page.
Screenshots are saved under test-artifacts/.
"""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from browser import (
    CHROMIUM,
    CONTRASTS,
    contrasts,
    make_gates,
    open_notebook,
    release_gates,
    run_all,
    screenshot,
    switch_theme,
)

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")

AXE = Path(__file__).resolve().parents[2] / "labextension" / "node_modules" / "axe-core" / "axe.min.js"

LOGGED_THEN_PARKED = """
import os
from notebook_launcher import notebook_launcher
from trainer_core import Accelerator
def logged_then_parked():
    accelerator = Accelerator(cpu=True)
    for step in range(30):
        print(f"step {{step}}")
        accelerator.log({{"loss": 1.0 / (step + 1)}}, step=step)
    with open(os.path.join({gates!r}, "a11y" + os.environ["RANK"])) as gate:   # a FIFO the test opens
        gate.read()
    return accelerator.process_index
notebook_launcher(logged_then_parked, num_processes=2)
"""

# axe-core's serious and critical violations inside ``selector``: [{id, impact, help, nodes}].
AXE_RUN = """async (selector) => {
    const found = await axe.run(document.querySelectorAll(selector), {resultTypes: ['violations']});
    return found.violations.filter(v => v.impact === 'serious' || v.impact === 'critical').map(v => ({
        id: v.id, impact: v.impact, help: v.help,
        nodes: v.nodes.slice(0, 4).map(n => n.target.join(' ') + ' :: ' + n.failureSummary)}));
}"""

# Each tab of the widget: its name, and whether the panel it names exists, is a tab panel and shows
# when the tab is selected.
TABS = """() => [...document.querySelectorAll('.nl-root [role=tab]')].map(tab => {
    const panel = document.getElementById(tab.getAttribute('aria-controls') || '');
    return {name: tab.textContent.trim(), selected: tab.getAttribute('aria-selected') === 'true',
            panel: !!panel && panel.getAttribute('role') === 'tabpanel',
            shown: !!panel && panel.checkVisibility()};
})"""

# The focused element's outline: its width and its contrast against what the element sits on
# (WCAG 1.4.11 asks 3:1 of a focus indicator).
FOCUS_RING = """() => {
    const el = document.activeElement, style = getComputedStyle(el);
    const probe = document.createElement('span');
    probe.style.color = style.outlineColor;
    probe.textContent = 'x';
    probe.className = 'nl-ring-probe';
    el.parentElement.appendChild(probe);
    return {width: parseFloat(style.outlineWidth), style: style.outlineStyle, text: el.textContent.trim()};
}"""


def _violations(page, selector):
    if not page.evaluate("() => typeof axe !== 'undefined'"):
        page.add_script_tag(path=str(AXE))
    return page.evaluate(AXE_RUN, selector)


def _focus_ring(page, button):
    """Tab onto ``button`` (a keyboard focus, which draws the focus ring) and read its ring:
    (width in px, style, contrast against the background)."""
    button.focus()
    page.keyboard.press("Shift+Tab")
    page.keyboard.press("Tab")
    ring = page.evaluate(FOCUS_RING)
    (contrast,) = page.evaluate(CONTRASTS, ".nl-ring-probe")
    page.evaluate("() => document.querySelectorAll('.nl-ring-probe').forEach(e => e.remove())")
    return ring, contrast["ratio"]


@pytest.mark.skipif(not AXE.exists(), reason="axe-core is not installed: make labextension/node_modules")
def test_the_live_widget_and_the_finished_form_pass_axe(lab, browser):
    gates = make_gates(lab.root / "a11y-gates", "a11y")
    page = open_notebook(browser, lab, "a11y.ipynb", [LOGGED_THEN_PARKED.format(gates=str(gates))])
    run_all(page)
    page.locator(".nl-root .nl-logbox", has_text="step 29").first.wait_for(timeout=120_000)
    page.locator('.nl-root .nl-chart[data-key="loss"] polyline').first.wait_for(timeout=60_000)
    found = _violations(page, ".nl-root")
    screenshot(page.locator(".jp-OutputArea-output", has=page.locator(".nl-root")).first, "a11y-live.png")
    assert found == [], found
    tabs = page.evaluate(TABS)
    assert [tab["name"] for tab in tabs] == ["all ranks", "rank 0", "rank 1"], tabs
    assert all(tab["panel"] and tab["shown"] == tab["selected"] for tab in tabs), tabs
    chart = page.locator('.nl-root .nl-chart[data-key="loss"] svg').first
    assert (chart.get_attribute("aria-label") or "").startswith("loss from")

    # the keyboard reaches the log (its newest line) and Page Up scrolls it (JupyterLab keeps the
    # arrow keys for moving between cells)
    page.locator(".nl-root .nl-logend").first.focus()
    box = page.locator(".nl-root .nl-logbox").first
    before = box.evaluate("b => b.scrollTop")
    page.keyboard.press("PageUp")
    page.wait_for_function("(b) => b.scrollTop < " + str(before), arg=box.element_handle(), timeout=10_000)

    save = page.locator(".nl-root .jupyter-button", has_text="Save log").first
    for theme, light in (("JupyterLab Light", True), ("JupyterLab Dark", False)):
        if not light:
            switch_theme(page, theme, light)
        ring, contrast = _focus_ring(page, save)
        assert ring["style"] != "none" and ring["width"] >= 2 and contrast >= 3.0, (theme, ring, contrast)
    release_gates(gates, "a11y")
    page.locator(".nl-static .nl-summary", has_text="succeeded in").first.wait_for(timeout=120_000)
    found = _violations(page, ".nl-static")
    assert found == [], found

    # saved, then opened by someone else (untrusted: no stylesheet) in the light theme, where the
    # chips' white text once lived only in the stylesheet (3.8:1 on the page's dark text)
    switch_theme(page, "JupyterLab Light", light=True)
    page.keyboard.press("Control+s")
    page.wait_for_function("() => !document.querySelector('.jp-mod-dirty')", timeout=30_000)
    page.close()
    shared = nbformat.read(lab.root / "a11y.ipynb", as_version=4)
    shared.metadata["shared_by"] = "a colleague"  # other content than the server signed: untrusted
    nbformat.write(shared, lab.root / "a11y-shared.ipynb")
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(lab.url("/lab/tree/a11y-shared.ipynb?reset"))
    page.locator(".nl-static .nl-summary", has_text="succeeded in").first.wait_for(timeout=60_000)
    assert page.locator(".nl-static style").count() == 0  # untrusted indeed
    chips = contrasts(page, ".nl-static .nl-chip")
    assert len(chips) == 2 and all(chip["ratio"] >= 4.5 for chip in chips), chips
    found = _violations(page, ".nl-static")
    assert found == [], found
    screenshot(page.locator(".jp-OutputArea-output", has=page.locator(".nl-static")).first, "a11y-untrusted.png")
    page.close()
