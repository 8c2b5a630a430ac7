"""The JupyterLab sidebar in a real JupyterLab and Debian's Chromium: load, devices, device count,
a launch with no num_processes, the launch listed, and a kernel restart followed.

Screenshots are saved under test-artifacts/.
"""

from __future__ import annotations

import os
import re

import pytest
from browser import CHROMIUM, contrasts, open_notebook, run_all, screenshot

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")

CELL = """
import os
import re
from notebook_launcher import notebook_launcher
sizes = notebook_launcher(lambda: os.environ["WORLD_SIZE"], display="text")
print("world size:", sizes)
print("spawned:", notebook_launcher(lambda: "yes", num_processes=1, start_method="spawn", display="none"))
"""

BLOCKING_CELL = """
import threading
notebook_launcher(lambda: threading.Event().wait(), display="text")
"""


def test_sidebar_sets_the_device_count_that_a_launch_uses(lab, browser):
    page = open_notebook(browser, lab, "sidebar.ipynb", [CELL, BLOCKING_CELL])
    page.locator('.jp-SideBar .lm-TabBar-tab[data-id="notebook-launcher-sidebar"]').click()
    sidebar = page.locator("#notebook-launcher-sidebar")
    sidebar.get_by_text("notebook_launcher is not loaded in this kernel.").wait_for(timeout=30_000)
    sidebar.get_by_role("button", name="Load notebook_launcher").click()
    cpus = len(os.sched_getaffinity(0))
    sidebar.get_by_text(f"CPU: {cpus} cores").wait_for(timeout=30_000)
    server = sidebar.locator('[data-testid="nl-section-start_server"] [data-key="server"]')
    assert server.inner_text() == "Spawn start server: not started (starts with the first spawn launch)"
    picker = sidebar.locator('[data-testid="nl-num-processes"]')
    assert picker.locator("option").all_inner_texts() == ["default (1)"] + [str(n) for n in range(1, cpus + 1)]
    picker.select_option("2")
    page.wait_for_function("() => document.querySelector('[data-testid=nl-num-processes]').value === '2'")
    page.evaluate("() => { document.querySelector('[data-testid=nl-num-processes]').nlMark = 'kept'; }")
    run_all(page)
    page.get_by_text("world size: 2").wait_for(timeout=120_000)
    page.get_by_text("spawned: yes").wait_for(timeout=120_000)
    server.get_by_text("Spawn start server: warm · pid ").wait_for(timeout=30_000)
    server.get_by_text("· 1 rank started").wait_for(timeout=30_000)  # and no longer running
    assert "torch " in server.inner_text() and "running" not in server.inner_text()
    sidebar.locator(".nl-launch-succeeded", has_text="2 ranks").first.wait_for(timeout=30_000)
    two_ranks = sidebar.locator(".nl-launch-succeeded", has_text="2 ranks")
    assert two_ranks.count() == 1 and two_ranks.locator(".nl-rank-done").count() == 2
    assert sidebar.locator('[data-testid="nl-num-processes"]').input_value() == "2"
    # keyed updates: the dropdown is the same element after every launch update (an open one stays open)
    assert page.evaluate("() => document.querySelector('[data-testid=nl-num-processes]').nlMark") == "kept"
    assert two_ranks.locator(".nl-cell-link").inner_text() == "In [2]"

    stop = sidebar.locator(".nl-launch-running .nl-stop")  # the second cell's launch never returns
    sidebar.locator(".nl-launch-running .nl-rank-running").nth(1).wait_for(timeout=60_000)
    elapsed = sidebar.locator(".nl-launch-running .nl-elapsed")
    first = float(elapsed.inner_text().split()[0])
    page.wait_for_function(
        f"() => parseFloat(document.querySelector('.nl-launch-running .nl-elapsed').textContent) >= {first + 1.0}",
        timeout=10_000,
    )  # ticks without kernel messages
    screenshot(sidebar, "sidebar.png")
    low = [chip for chip in contrasts(page, ".nl-sidebar .nl-rank") if chip["ratio"] < 4.5]
    assert not low, low  # every rank chip reads at 4.5:1
    stop.click()
    page.get_by_text("KeyboardInterrupt").first.wait_for(timeout=30_000)
    sidebar.locator(".nl-launch-stopped").first.wait_for(timeout=30_000)

    page.locator(".lm-MenuBar-itemLabel", has_text="Kernel").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Restart Kernel…").first.click()
    page.locator(".jp-Dialog-button.jp-mod-accept").click()
    sidebar.get_by_text("notebook_launcher is not loaded in this kernel.").wait_for(timeout=60_000)
    # importing the package announces it: the panel connects with no click on Load
    cell = page.locator(".jp-Cell").last
    cell.click()
    page.keyboard.press("Escape")
    page.keyboard.press("b")  # a new cell below
    page.locator(".jp-Cell").last.locator(".cm-content").click()
    page.keyboard.insert_text("import notebook_launcher")
    page.keyboard.press("Shift+Enter")
    sidebar.get_by_text(f"CPU: {cpus} cores").wait_for(timeout=60_000)
    assert sidebar.get_by_role("button", name="Load notebook_launcher").is_hidden()
    page.close()


def test_the_sidebar_works_in_notebook_7(browser, tmp_path):
    """Notebook 7 shows JupyterLab side panels from its View menu: the panel connects and lists the devices."""
    from browser import LabServer, write_notebook

    write_notebook(tmp_path / "nb7.ipynb", ["import notebook_launcher"])
    server = LabServer(tmp_path, app="notebook")
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(server.url("/notebooks/nb7.ipynb"))
        page.get_by_text("# loaded").first.wait_for(timeout=60_000)
        page.locator(".lm-MenuBar-itemLabel", has_text="View").first.click()
        page.locator(".lm-Menu-itemLabel", has_text="Left Sidebar").first.hover()
        page.locator(".lm-Menu-itemLabel", has_text="Show Notebook launcher").first.click()
        sidebar = page.locator("#notebook-launcher-sidebar")
        sidebar.get_by_role("button", name="Load notebook_launcher").click()
        cpus = len(os.sched_getaffinity(0))
        sidebar.get_by_text(f"CPU: {cpus} cores").wait_for(timeout=60_000)
        screenshot(sidebar, "sidebar-notebook7.png")
        page.close()
    finally:
        server.stop()


def test_reloading_the_page_leaves_the_kernel_one_sidebar_to_send_to(lab, browser):
    """Each page load opens a sidebar comm. Before, none was ever closed: after three reloads the
    kernel sent every update four times, three of them to pages that were gone."""
    page = open_notebook(browser, lab, "reloads.ipynb", ["import notebook_launcher"])
    run_all(page)
    cpus = len(os.sched_getaffinity(0))
    for _ in range(4):
        page.locator('.jp-SideBar .lm-TabBar-tab[data-id="notebook-launcher-sidebar"]').click()
        page.locator("#notebook-launcher-sidebar").get_by_text(f"CPU: {cpus} cores").wait_for(timeout=60_000)
        page.reload()
        page.get_by_text("# loaded").first.wait_for(timeout=60_000)
        page.locator(".jp-StatusBar-TextItem", has_text=re.compile(r"\|\s*Idle")).first.wait_for(timeout=90_000)
    page.locator('.jp-SideBar .lm-TabBar-tab[data-id="notebook-launcher-sidebar"]').click()
    page.locator("#notebook-launcher-sidebar").get_by_text(f"CPU: {cpus} cores").wait_for(timeout=60_000)
    page.locator(".jp-Cell").last.click()
    page.keyboard.press("Escape")
    page.keyboard.press("b")
    page.locator(".jp-Cell").last.locator(".cm-content").click()
    page.keyboard.insert_text(
        "from notebook_launcher.frontend.sidebar_comm import open_sidebars\nprint('sidebars:', open_sidebars())"
    )
    page.keyboard.press("Shift+Enter")
    printed = page.locator(".jp-OutputArea-output", has_text="sidebars: ").first
    printed.wait_for(timeout=60_000)
    assert printed.inner_text().strip() == "sidebars: 1"
    page.close()


def test_a_backend_package_shows_its_own_section_and_button_with_no_front_end_change(lab, browser):
    """The sandbox backend (``tests/backend_sandbox``, a package outside the launcher) is loaded in
    the kernel after the sidebar connected: its section (title, rows, a Ping button) appears, drawn
    from the one schema, and a click reaches its ``act`` and shows the changed section. Nothing in
    the front end names it."""
    from paths import SANDBOX_BACKEND

    setup = (
        f"import sys\nsys.path.insert(0, {str(SANDBOX_BACKEND)!r})\n"
        "from notebook_launcher.backends import get_backend, register_backend\n"
        "register_backend('sandbox', 'sandbox_backend:SandboxBackend')"
    )
    page = open_notebook(browser, lab, "sections.ipynb", [setup])
    page.locator('.jp-SideBar .lm-TabBar-tab[data-id="notebook-launcher-sidebar"]').click()
    sidebar = page.locator("#notebook-launcher-sidebar")
    run_all(page)
    cpus = len(os.sched_getaffinity(0))
    sidebar.get_by_text(f"CPU: {cpus} cores").wait_for(timeout=60_000)
    section = sidebar.locator('[data-testid="nl-section-sandbox"]')
    assert section.count() == 0  # registered, not loaded yet
    page.locator(".jp-Cell").last.click()
    page.keyboard.press("Escape")
    page.keyboard.press("b")
    page.locator(".jp-Cell").last.locator(".cm-content").click()
    page.keyboard.insert_text("get_backend('sandbox'); print('loaded')")
    page.keyboard.press("Shift+Enter")
    section.get_by_text("Sandbox backend").wait_for(timeout=60_000)
    assert section.locator("h4").inner_text() == "Sandbox backend"
    assert section.locator('[data-key="about"]').inner_text() == "ranks are subprocesses of this package"
    pings = section.locator('[data-key="pings"]')
    assert pings.inner_text() == "pinged 0 times" and pings.is_visible()
    server = sidebar.locator('[data-testid="nl-section-start_server"] [data-key="server"]')
    assert server.is_visible() and server.inner_text().startswith("Spawn start server: ")
    section.get_by_role("button", name="Ping").click()
    section.get_by_text("pinged 1 times").wait_for(timeout=30_000)
    assert section.get_by_role("button", name="Ping").is_enabled()  # drawn again with the new section
    screenshot(sidebar, "sidebar-backend-section.png")
    page.close()
