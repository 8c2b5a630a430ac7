"""The launch's output in a real JupyterLab and Notebook 7, in a real browser (Debian's Chromium
driven by Playwright): the live widget, reading back through a growing log, the dark theme, and
the saved notebook reopened after a kernel restart.

Screenshots are saved under test-artifacts/.
"""

from __future__ import annotations

import json
import os
import re
import urllib.request

import pytest
from browser import (
    CHROMIUM,
    brightness,
    contrasts,
    make_gates,
    notebook7_page,
    open_notebook,
    parked_launch,
    release_gates,
    run_all,
    screenshot,
    switch_theme,
)
from paths import NOTEBOOKS

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")

TRAIN = """
import os
from notebook_launcher import launch
GATES = {gates!r}
def wait_gate(name):
    with open(os.path.join(GATES, name + os.environ["RANK"])) as gate:   # a FIFO: the test opens it
        gate.read()
def train():
    from trainer_core import Accelerator
    accelerator = Accelerator()
    rank = accelerator.process_index
    for step in range(700):
        if step in (300, 500):
            wait_gate("ab"[step == 500])
        print(f"rank {{rank}}: step {{step}}")
        if step < 300:
            accelerator.log({{"loss": 1.0 / (step + 1) + 0.1 * rank}})
    wait_gate("c")
    return rank
job = launch(train, num_processes=2)
job.wait()
"""


def _box_metrics(page):
    """Where the second chunk of the visible log box sits, the box's scroll offset, and the selection."""
    return page.evaluate("""() => {
        const box = [...document.querySelectorAll('.nl-logbox')].find(e => e.clientHeight > 0);
        const chunks = box.querySelectorAll('.nl-loglines > *');
        const top = box.getBoundingClientRect().top;
        return {offset: chunks[2].getBoundingClientRect().top - top, scrollTop: box.scrollTop,
                selection: window.getSelection().toString(), chunks: chunks.length};
    }""")


def test_the_live_widget_keeps_the_reader_then_the_notebook_keeps_the_launch(lab, browser, tmp_path_factory):
    gates = lab.root / "gates"
    for name in ("a", "b", "c"):
        make_gates(gates, name)
    page = open_notebook(browser, lab, "widget.ipynb", [TRAIN.format(gates=str(gates))])
    run_all(page)
    # the live widget: chips, an "all ranks" tab (selected) and one per rank, the chart and its legend
    page.locator(".nl-chip", has_text="rank 1: running").first.wait_for(timeout=120_000)
    tabs = page.locator(".lm-TabBar-tabLabel", has_text="rank")
    assert [tabs.nth(i).inner_text() for i in range(tabs.count())] == ["all ranks", "rank 0", "rank 1"]
    page.locator(".nl-logbox", has_text="[rank 1] rank 1: step 299").first.wait_for(timeout=60_000)
    # the loss chart: a line per rank, and their mean (the measures' charts, CPU % and RSS MB, come
    # beside it once the kernel has sampled the ranks twice, a second or more into the launch)
    loss = page.locator('.nl-root .nl-chart[data-key="loss"]')
    assert loss.locator("svg polyline.nl-line:not(.nl-raw)").count() == 3
    assert loss.locator("svg polyline.nl-mean:not(.nl-raw)").count() == 1
    assert page.locator(".nl-legend", has_text="rank 1").count() >= 1
    ticks = page.evaluate("() => [...document.querySelectorAll('.nl-chart svg text')].map(t => t.textContent)")
    assert "0" in ticks and "300" in ticks and len(ticks) >= 6, ticks  # tick labels on both axes, live

    # scrolled up, with text selected: new lines arrive below and the reader's view does not move
    page.evaluate("""() => {
        const box = [...document.querySelectorAll('.nl-logbox')].find(e => e.clientHeight > 0);
        box.scrollTop = -(box.scrollHeight - box.clientHeight) / 2;
        const chunk = box.querySelectorAll('.nl-loglines > *')[2];
        const range = document.createRange(); range.selectNodeContents(chunk.querySelector('pre'));
        window.getSelection().removeAllRanges(); window.getSelection().addRange(range);
    }""")
    before = _box_metrics(page)
    release_gates(gates, "a")
    page.locator(".nl-logbox", has_text="rank 1: step 499").first.wait_for(timeout=60_000)
    after = _box_metrics(page)
    assert abs(after["offset"] - before["offset"]) <= 1 and after["chunks"] > before["chunks"]
    assert after["selection"] == before["selection"] != ""

    # at the bottom, the newest line follows
    page.evaluate(
        """() => { [...document.querySelectorAll('.nl-logbox')].find(e => e.clientHeight > 0).scrollTop = 0; }"""
    )
    release_gates(gates, "b")
    page.locator(".nl-logbox", has_text="rank 1: step 699").first.wait_for(timeout=60_000)
    newest_in_view = page.evaluate("""() => {
        const box = [...document.querySelectorAll('.nl-logbox')].find(e => e.clientHeight > 0);
        const pres = [...box.querySelectorAll('pre')].filter(p => p.textContent.includes('step 699'));
        const last = pres[pres.length - 1].getBoundingClientRect(), frame = box.getBoundingClientRect();
        return last.bottom <= frame.bottom + 2 && last.bottom >= frame.top;
    }""")
    assert newest_in_view
    screenshot(page.locator(".jp-OutputArea-output", has=page.locator(".nl-chip")).first, "widget.png")

    # the end: the output becomes the static form, in place of the widget
    release_gates(gates, "c")
    page.locator(".nl-static .nl-summary", has_text="succeeded in").first.wait_for(timeout=60_000)
    assert page.locator(".nl-logbox").count() == 0
    assert page.locator(".nl-static details.nl-ranklog").count() == 2
    # what a person sees of the finished launch in the light theme: dark text, not white on white
    # (the sidebar's stylesheet once restyled the static form's rank logs)
    seen = page.evaluate("""() => {
        const log = document.querySelector('.nl-static details.nl-ranklog');
        const colour = el => getComputedStyle(el).color;
        return {summary: colour(log.querySelector('summary')), line: colour(log.querySelector('.nl-lines')),
                text: log.innerText};
    }""")
    assert brightness(seen["summary"]) < 100 and brightness(seen["line"]) < 100, seen
    assert "rank 0: step 699" in seen["text"]  # visible text, not only in the DOM

    # the dark theme: text and chart labels take the theme's colours
    switch_theme(page, "JupyterLab Dark", light=False)
    label = page.evaluate("""() => getComputedStyle(document.querySelector('.nl-static .nl-chart b')).color""")
    assert brightness(label) > 150  # light text on the dark background
    screenshot(page.locator(".jp-OutputArea-output", has=page.locator(".nl-static")).first, "widget-dark.png")

    # save, restart the kernel, reopen: the launch is still there, as the static form
    page.keyboard.press("Control+s")
    page.wait_for_function("() => !document.querySelector('.jp-mod-dirty')", timeout=30_000)
    _restart_kernels(lab)
    page.close()
    reopened = browser.new_page(viewport={"width": 1400, "height": 1000})
    reopened.goto(lab.url("/lab/tree/widget.ipynb?reset"))
    reopened.locator(".nl-static", has_text="rank 1: step 699").first.wait_for(timeout=60_000)
    assert reopened.get_by_text("Error displaying widget").count() == 0
    assert _chart_lines(reopened) == [3]  # a line per rank, and their mean
    screenshot(reopened.locator(".jp-OutputArea-output", has=reopened.locator(".nl-static")).first, "reopened.png")
    reopened.close()

    # Notebook 7 shows the same saved notebook the same way
    with notebook7_page(browser, lab.root, "widget.ipynb") as page:
        page.locator(".nl-static", has_text="rank 0: step 699").first.wait_for(timeout=60_000)
        assert page.get_by_text("Error displaying widget").count() == 0

    # shared with someone else: a copy JupyterLab never signed is untrusted, its <style> and <svg>
    # stripped; the chips, the chart and the logs still read well
    import nbformat

    shared = nbformat.read(lab.root / "widget.ipynb", as_version=4)
    shared.metadata["shared_by"] = "a colleague"  # other content than the server signed: untrusted
    nbformat.write(shared, lab.root / "shared.ipynb")
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(lab.url("/lab/tree/shared.ipynb?reset"))
    static = page.locator(".nl-static", has_text="rank 1: step 699").first
    static.wait_for(timeout=60_000)
    assert page.locator(".nl-static style").count() == 0  # untrusted indeed: the stylesheet is gone
    # opened, its kernel started and idle, the sidebar and picker connected: nothing was modified
    page.locator(".jp-StatusBar-TextItem", has_text=re.compile(r"\|\s*Idle")).first.wait_for(timeout=90_000)
    assert page.locator(".jp-mod-dirty").count() == 0
    text = static.inner_text()
    assert "rank 0: done rank 1: done" in text  # the chips read apart
    charts = page.evaluate(
        "() => [...document.querySelectorAll('.nl-static .nl-chart')]"
        ".map(c => c.innerText.split('\\n').filter(Boolean))"
    )
    for lines in charts:  # the title, the legend, the latest values: no SVG labels run together
        assert lines[-1].startswith(f"latest {lines[0].split(' (')[0].split(' · ')[0]}: "), lines
    assert _chart_lines(page) == [3]
    assert all(len(ticks) >= 6 for ticks in _chart_ticks(page))  # axis numbers, saved and untrusted
    low = [c for c in contrasts(page, ".nl-static .nl-chip, .nl-static .nl-prefix") if c["ratio"] < 4.5]
    assert not low, low
    # the logs stay capped in height without the stylesheet (700 lines a rank made it 26,000 px)
    assert static.bounding_box()["height"] < 1600
    seen = page.evaluate("""() => {
        const log = document.querySelector('.nl-static details.nl-ranklog');
        let under = log;  // the first ancestor with a background of its own: what the text sits on
        while (under && ['transparent', 'rgba(0, 0, 0, 0)'].includes(getComputedStyle(under).backgroundColor)) {
            under = under.parentElement;
        }
        return {colour: getComputedStyle(log.querySelector('.nl-lines')).color, text: log.innerText,
                background: getComputedStyle(under || document.body).backgroundColor};
    }""")
    # the dark theme chosen above is still on: light text on a dark page
    assert abs(brightness(seen["colour"]) - brightness(seen["background"])) > 120, seen
    assert "rank 0: step 699" in seen["text"], seen
    screenshot(page.locator(".jp-OutputArea-output", has=page.locator(".nl-static")).first, "untrusted.png")
    page.close()


def _chart_lines(page, key="loss"):
    """For each chart image of metric ``key`` in the static forms that the browser drew (loaded, with a
    size): how many lines its SVG holds (a smoothed line and the faint raw one under it count once).
    The built-in measures' charts (CPU %, RSS MB) come beside it when a launch runs a second or more;
    the image's alt text names its metric (an untrusted notebook keeps it)."""
    return page.evaluate(f"""() => [...document.querySelectorAll('.nl-static img.nl-chart-image')]
        .filter(img => img.alt.startsWith('{key} from '))
        .filter(img => img.complete && img.naturalWidth > 0 && img.getBoundingClientRect().height > 0)
        .map(img => atob(img.src.split(',')[1]).split('<polyline').filter(p => !p.includes('nl-raw')).length - 1)""")


def _chart_ticks(page):
    """For each chart image of the static form: the tick labels its SVG draws."""
    return page.evaluate("""() => [...document.querySelectorAll('.nl-static img.nl-chart-image')]
        .map(img => [...atob(img.src.split(',')[1]).matchAll(new RegExp('<text[^>]*>([^<]*)</text>', 'g'))])
        .map(labels => labels.map(m => m[1]))""")


def _restart_kernels(server):
    for kernel in json.load(urllib.request.urlopen(server.url("/api/kernels"))):
        request = urllib.request.Request(server.url(f"/api/kernels/{kernel['id']}/restart"), method="POST", data=b"")
        urllib.request.urlopen(request).read()


def test_the_shipped_quickstart_reads_well_as_a_clone_opens_it(lab, browser):
    """A clone's notebooks are untrusted (no server ever signed them): the quickstart's saved launch
    shows its chips apart, its chart drawn and its logs capped, and opening it modifies nothing."""
    import shutil

    shutil.copy(NOTEBOOKS / "quickstart.ipynb", lab.root)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(lab.url("/lab/tree/quickstart.ipynb?reset"))
    static = page.locator(".nl-static", has_text="succeeded in").first
    static.wait_for(timeout=60_000)
    page.locator(".jp-StatusBar-TextItem", has_text=re.compile(r"\|\s*Idle")).first.wait_for(timeout=90_000)
    assert page.locator(".nl-static style").count() == 0  # untrusted
    assert "rank 0: done rank 1: done" in static.inner_text()
    assert _chart_lines(page) == [3]  # the loss chart, a line per rank and their mean
    assert static.bounding_box()["height"] < 1600
    assert page.get_by_text("Error displaying widget").count() == 0
    assert page.locator(".jp-mod-dirty").count() == 0
    screenshot(page.locator(".jp-OutputArea-output", has=page.locator(".nl-static")).first, "quickstart-clone.png")
    page.close()


def test_eight_ranks_finished_look_about_as_tall_as_they_did_live(lab, browser):
    """Eight ranks of 100 lines: the finished form folds each rank's log under one capped log of
    them all, so it stays about as tall as the live widget (it once grew from 702 to 3,954 px)."""
    gates = make_gates(lab.root / "eight-gates", "e", ranks=range(8))
    cell = parked_launch(gates, "e", lines=100, ranks=8, blocking=False)
    page = open_notebook(browser, lab, "eight.ipynb", [cell])
    run_all(page)
    page.locator(".nl-chip", has_text="rank 7: running").first.wait_for(timeout=180_000)
    page.locator(".nl-logbox", has_text="rank 7: step 99").first.wait_for(timeout=60_000)
    output = page.locator(".jp-OutputArea-output", has=page.locator(".nl-logbox")).first
    output.locator(".nl-charts svg").first.wait_for(timeout=60_000)  # the measures' charts, as the finished form has
    live = output.bounding_box()["height"]
    release_gates(str(gates), "e", ranks=range(8))
    finished = page.locator(".jp-OutputArea-output", has=page.locator(".nl-static .nl-summary")).first
    finished.wait_for(timeout=60_000)
    height = finished.bounding_box()["height"]
    screenshot(finished, "eight-ranks-finished.png")
    assert height < 1.5 * live, f"{height:.0f} px finished against {live:.0f} px live"
    assert "rank 7: step 99" in finished.inner_text()  # the last lines are in view, in the all-ranks log
    page.close()
