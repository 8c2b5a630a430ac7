"""A page that parts ways with its kernel mid-launch, in a real JupyterLab in Chromium: reloaded
with the notebook never saved (its file holds no output of the launch), a second tab opened on
it, and a network that drops for 30 s. Each shows the launch in its cell and follows it (the
form refreshed from the server's snapshots every second, or the widget once the network is back)
until it ends, then its final form, and the reloaded page's sidebar
connects while the cell still blocks. Before, the reloaded cell stayed empty for the rest of the
run and after it, and the sidebar said "Connecting to the kernel…" until the cell ended.

Screenshots are saved under test-artifacts/.
"""

from __future__ import annotations

import os
import re

import pytest
from browser import CHROMIUM, make_gates, open_notebook, parked_launch, release_gates, run_all, screenshot

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")

# the seconds the followed form says the launch has run ("running · 7.2 s · as of …")
RUN_SECONDS = """() => {
    const found = /· running · ([0-9.]+) s/.exec(document.querySelector('.nl-live-launch')?.innerText ?? '');
    return found ? parseFloat(found[1]) : -1;
}"""


def test_a_reloaded_page_and_a_second_tab_follow_a_launch_the_notebook_never_saved(lab, browser):
    gates = make_gates(lab.root / "reload-gates", "r")
    page = open_notebook(browser, lab, "reload.ipynb", [parked_launch(gates, "r", lines=50)])
    run_all(page)
    page.locator(".nl-logbox", has_text="rank 1: step 49").first.wait_for(timeout=120_000)
    assert "data-launch" not in (lab.root / "reload.ipynb").read_text()  # never saved with the launch

    page.on("dialog", lambda dialog: dialog.accept())  # "leave the page with unsaved changes?": yes
    page.reload()
    second = browser.new_page(viewport={"width": 1400, "height": 1000})
    second.goto(lab.url("/lab/tree/reload.ipynb"))
    for view in (page, second):
        view.locator(".nl-live-launch", has_text="rank 1: step 49").first.wait_for(timeout=60_000)
        view.wait_for_function(f"() => ({RUN_SECONDS})() > 0", timeout=30_000)
        first = view.evaluate(RUN_SECONDS)
        view.wait_for_function(f"() => ({RUN_SECONDS})() > {first}", timeout=30_000)  # it follows the launch
        assert view.locator(".nl-live-launch").count() == 1  # one launch output, in its cell
    screenshot(page.locator(".nl-live-launch").first, "reloaded.png")
    # the reloaded page's sidebar connects while the cell still blocks (before: "Connecting…" until it ended)
    page.locator('.jp-SideBar .lm-TabBar-tab[data-id="notebook-launcher-sidebar"]').click()
    sidebar = page.locator("#notebook-launcher-sidebar")
    sidebar.locator(".nl-launch-running", has_text="2 ranks").first.wait_for(timeout=30_000)
    assert "Connecting" not in sidebar.inner_text()

    release_gates(gates, "r")
    for view in (page, second):
        view.locator(".nl-live-launch", has_text=re.compile(r"succeeded in [0-9.]+ s")).first.wait_for(timeout=60_000)
        assert "· running ·" not in view.locator(".nl-live-launch").first.inner_text()
    second.close()
    page.close()


def test_a_page_reloaded_after_a_save_follows_a_launch_whose_cell_still_waits(lab, browser):
    """Saved mid-launch, then reloaded while ``notebook_launcher()`` still blocks its cell (the
    kernel answers no widget request until the launch ends): the saved form follows the launch,
    then shows how it ended. Before, it said "running · 8.3 s · as of …" for good."""
    gates = make_gates(lab.root / "saved-gates", "s")
    page = open_notebook(browser, lab, "saved.ipynb", [parked_launch(gates, "s", lines=50)])
    run_all(page)
    page.locator(".nl-logbox", has_text="rank 1: step 49").first.wait_for(timeout=120_000)
    page.keyboard.press("Control+s")
    page.wait_for_function("() => !document.querySelector('.jp-mod-dirty')", timeout=30_000)
    assert "before the launch ended" in (lab.root / "saved.ipynb").read_text()

    page.reload()
    shown = page.locator(".nl-saved-launch .nl-live-launch").first
    shown.wait_for(timeout=60_000)
    page.wait_for_function(f"() => ({RUN_SECONDS})() > 0", timeout=30_000)
    first = page.evaluate(RUN_SECONDS)
    page.wait_for_function(f"() => ({RUN_SECONDS})() > {first}", timeout=30_000)  # it follows the launch
    assert page.get_by_text("Error displaying widget").count() == 0

    release_gates(gates, "s")
    page.locator(".nl-saved-launch", has_text=re.compile(r"succeeded in [0-9.]+ s")).first.wait_for(timeout=60_000)
    assert "· running ·" not in page.locator(".nl-saved-launch").first.inner_text()
    page.close()


TICKING = """
import os, time
from notebook_launcher import notebook_launcher
def ticking():
    rank = int(os.environ["RANK"])
    tick = 0
    while not os.path.exists({stop!r}):
        print(f"rank {{rank}}: tick {{tick}}", flush=True)
        tick += 1
        time.sleep(0.2)
    print(f"rank {{rank}}: stopped after {{tick}} ticks", flush=True)
    return tick
notebook_launcher(ticking, num_processes=2)
"""

# the highest tick of rank 1 the cell's output shows
LAST_TICK = """() => {
    const shown = [...document.querySelectorAll('.jp-OutputArea-output')].map(output => output.innerText).join('\\n');
    const ticks = [...shown.matchAll(/rank 1: tick ([0-9]+)/g)];
    return ticks.length ? Math.max(...ticks.map(found => parseInt(found[1]))) : -1;
}"""


class Network:
    """The page's kernel WebSockets, routed through the test so it can cut them and keep them cut
    (with the page offline for its HTTP requests too), as a dropped Wi-Fi or a sleeping laptop does."""

    def __init__(self):
        self.down = False
        self.open = []

    def prepare(self, page):
        page.route_web_socket(re.compile(r"/api/kernels/.*/channels"), self._connect)

    def _connect(self, route):
        if self.down:
            route.close()
            return
        self.open.append((route, route.connect_to_server()))

    def drop(self, page):
        self.down = True
        page.context.set_offline(True)
        for route, server in self.open:
            server.close()
            route.close()
        self.open = []

    def restore(self, page):
        self.down = False
        page.context.set_offline(False)


def test_a_page_whose_network_drops_for_30_s_follows_the_launch_again(lab, browser):
    """The kernel's WebSocket cut and refused for 30 s while a launch blocks its cell, then the
    network back: the widget goes on showing new lines of the same launch, the sidebar shows it
    running, then the cell shows its final form."""
    stop = lab.root / "network-stop"
    network = Network()
    page = open_notebook(browser, lab, "network.ipynb", [TICKING.format(stop=str(stop))], prepare=network.prepare)
    run_all(page)
    page.wait_for_function(f"() => ({LAST_TICK})() >= 5", timeout=120_000)
    network.drop(page)
    at_drop = page.evaluate(LAST_TICK)
    page.wait_for_timeout(30_000)  # the drop itself: 30 s without a connection
    before = page.evaluate(LAST_TICK)
    assert before <= at_drop + 5, "the page still got the launch's lines: the network was not cut"
    network.restore(page)
    page.wait_for_function(f"() => ({LAST_TICK})() > {before + 20}", timeout=90_000)  # live again
    assert page.locator(".nl-root").count() == 1  # the one widget of the launch
    page.keyboard.press("Escape")  # JupyterLab's own "Server Connection Error" dialog of the drop
    screenshot(page.locator(".nl-root").first, "network-back.png")
    # the sidebar is connected again too, while the cell still blocks
    page.locator('.jp-SideBar .lm-TabBar-tab[data-id="notebook-launcher-sidebar"]').click()
    sidebar = page.locator("#notebook-launcher-sidebar")
    sidebar.locator(".nl-launch-running", has_text="2 ranks").first.wait_for(timeout=30_000)
    assert "Connecting" not in sidebar.inner_text()
    stop.touch()
    final = page.locator(".jp-OutputArea-output", has_text=re.compile(r"succeeded in [0-9.]+ s")).first
    final.wait_for(timeout=60_000)
    assert "stopped after" in final.inner_text()
    page.close()
