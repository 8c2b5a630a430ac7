"""A failing rank and a ``%%dist`` session as a person sees them in a real browser: JupyterLab in the
light and the dark theme, the notebook saved and reopened, a copy of it opened untrusted, and
Notebook 7 opening it. Every view is
checked for what is visible (the text, its contrast with what it sits on, the failure shown once)
and saved as a screenshot under test-artifacts/ (``screen-*.png``).
"""

from __future__ import annotations

import os

import nbformat
import pytest
from browser import CHROMIUM, brightness, notebook7_page, open_notebook, run_all, screenshot, switch_theme

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")

CELLS = [
    "import notebook_launcher  # registers %dist\n%dist start 2",
    "%%dist\nimport os\nprint('hello from rank', os.environ['RANK'])",
    "%dist stop",
    """
import os
from notebook_launcher import notebook_launcher
def fails():
    import torch.distributed as dist
    dist.init_process_group("gloo")
    print("rank", os.environ["RANK"], "starts", flush=True)
    dist.barrier()  # both have printed before rank 1 fails (which ends rank 0)
    if os.environ["RANK"] == "1":
        raise ValueError("rank 1 saw bad data")
    return "ok"
notebook_launcher(fails, num_processes=2)
""",
]

# what every output of ours shows: (the element, the colour of its text, what it sits on, its text)
_SEEN = """() => [...document.querySelectorAll('.jp-OutputArea-output')].map(out => {
    const under = el => {
        while (el && ['transparent', 'rgba(0, 0, 0, 0)'].includes(getComputedStyle(el).backgroundColor)) {
            el = el.parentElement;
        }
        return getComputedStyle(el || document.body).backgroundColor;
    };
    const texts = [...out.querySelectorAll('.nl-lines, summary, pre, .nl-summary')]
        .filter(el => el.getBoundingClientRect().height > 0);
    return {text: out.innerText, contrasts: texts.map(el => [getComputedStyle(el).color, under(el)])};
})"""


def _check_readable(page, view):
    """Every launch output's visible text contrasts with what it sits on; the failure is shown once."""
    outputs = page.evaluate(_SEEN)
    everything = "\n".join(out["text"] for out in outputs)
    assert everything.count("ValueError: [rank 1] rank 1 saw bad data") == 1, (view, everything)  # once
    assert everything.count("Traceback (most recent call last)") == 1, (view, everything)
    assert "hello from rank 0" in everything and "hello from rank 1" in everything, view
    assert "rank 0 starts" in everything and "rank 1 starts" in everything, view
    for out in outputs:
        for colour, background in out["contrasts"]:
            assert abs(brightness(colour) - brightness(background)) > 100, (view, colour, background, out["text"])
    for name, has in (("failing-rank", "rank 1 saw bad data"), ("dist", "hello from rank 1")):
        cell = page.locator(".jp-Cell", has=page.locator(".jp-OutputArea-output", has_text=has)).first
        screenshot(cell, f"screen-{name}-{view}.png")


def test_a_failing_rank_and_a_dist_session_read_well_light_dark_reopened_and_in_notebook_7(lab, browser):
    page = open_notebook(browser, lab, "screens.ipynb", CELLS)
    run_all(page)
    page.locator(".jp-OutputArea-output", has_text="rank 1 saw bad data").first.wait_for(timeout=180_000)
    page.locator(".nl-static .nl-summary", has_text="failed").first.wait_for(timeout=60_000)
    _check_readable(page, "light")

    switch_theme(page, "JupyterLab Dark", light=False)
    _check_readable(page, "dark")

    page.keyboard.press("Control+s")
    page.locator(".jp-mod-dirty").first.wait_for(state="detached", timeout=30_000)
    page.reload()
    page.locator(".nl-static .nl-summary", has_text="failed").first.wait_for(timeout=60_000)
    assert page.get_by_text("Error displaying widget").count() == 0
    _check_readable(page, "reopened-dark")
    switch_theme(page, "JupyterLab Light", light=True)
    _check_readable(page, "reopened-light")
    page.close()

    # shared with someone else: a copy the server never signed is untrusted, its <style> stripped
    shared = nbformat.read(lab.root / "screens.ipynb", as_version=4)
    shared.metadata["shared_by"] = "a colleague"
    nbformat.write(shared, lab.root / "screens-shared.ipynb")
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(lab.url("/lab/tree/screens-shared.ipynb?reset"))
    page.locator(".nl-static .nl-summary", has_text="failed").first.wait_for(timeout=60_000)
    assert page.locator(".nl-static style").count() == 0  # untrusted indeed
    _check_readable(page, "untrusted")
    page.close()

    with notebook7_page(browser, lab.root, "screens.ipynb") as page:
        page.locator(".nl-static .nl-summary", has_text="failed").first.wait_for(timeout=60_000)
        assert page.get_by_text("Error displaying widget").count() == 0
        _check_readable(page, "notebook7")
