"""A real JupyterLab server and a real browser (Debian's Chromium through Playwright) for UI tests.

``LabServer`` starts ``jupyter lab`` on a free port in a scratch folder with its own settings (no
news pop-up) and stops it by PID. ``open_notebook`` writes a notebook, opens it with a reset
workspace, waits until its kernel is idle and returns the page. ``make_gates`` / ``release_gates``
hold ranks at FIFOs until the test lets them go; ``parked_launch`` is a cell whose ranks print, then
wait at one. ``switch_theme`` picks a JupyterLab theme; ``brightness`` reads a computed colour.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import nbformat
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


class LabServer:
    """``app="jupyterlab"`` (JupyterLab) or ``app="notebook"`` (Notebook 7), run by ``python``
    (another environment's: JupyterLab with real-time collaboration) with ``env`` added."""

    def __init__(self, root, app="jupyterlab", python=sys.executable, env=None):
        from notebook_launcher.launching.ports import free_port

        self.root = Path(root)
        self.port = free_port("127.0.0.1")
        self.token = secrets.token_hex(16)
        settings = self.root / ".settings" / "@jupyterlab" / "apputils-extension"
        settings.mkdir(parents=True, exist_ok=True)
        (settings / "notification.jupyterlab-settings").write_text(
            json.dumps({"fetchNews": "false", "checkForUpdates": False})
        )
        # as a person's server starts: without what importing the package in this test process set
        unset = ("NOTEBOOK_LAUNCHER_DISPLAY", "PYTORCH_NVML_BASED_CUDA_CHECK")
        env = {**{k: v for k, v in os.environ.items() if k not in unset}, **(env or {})}
        # the server extension keeps running launches' snapshots here (its own, not the user's)
        self.snapshots = self.root / ".snapshots"
        self.snapshots.mkdir(mode=0o700, exist_ok=True)
        env["NOTEBOOK_LAUNCHER_SNAPSHOTS"] = str(self.snapshots)
        self.log = open(self.root / "lab.log", "w")  # noqa: SIM115  (closed in stop())
        settings_class = "LabApp" if app == "jupyterlab" else "JupyterNotebookApp"
        self.process = subprocess.Popen(
            [
                python,
                "-m",
                app,
                "--no-browser",
                "--allow-root",
                f"--port={self.port}",
                "--ServerApp.ip=127.0.0.1",
                f"--ServerApp.token={self.token}",
                f"--ServerApp.root_dir={self.root}",
                f"--{settings_class}.user_settings_dir={self.root / '.settings'}",
                f"--{settings_class}.workspaces_dir={self.root / '.ws'}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=self.root,
        )
        self._wait_ready(timeout=90)

    def url(self, path):
        separator = "&" if "?" in path else "?"
        return f"http://127.0.0.1:{self.port}{path}{separator}token={self.token}"

    def _wait_ready(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"jupyter lab exited: {(self.root / 'lab.log').read_text()[-2000:]}")
            try:
                urllib.request.urlopen(self.url("/api/status"), timeout=2).read()
                return
            except OSError:
                time.sleep(0.2)  # polling an outside server for readiness, bounded by the deadline
        raise TimeoutError("jupyter lab did not answer in time")

    def stop(self):
        self.process.terminate()
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


@contextmanager
def notebook7_page(browser, root, name):
    """A browser page on notebook ``name`` in Notebook 7, served from folder ``root`` by a server of
    its own (stopped, with the page closed, on leaving the block)."""
    server = LabServer(root, app="notebook")
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(server.url(f"/notebooks/{name}"))
        yield page
        page.close()
    finally:
        server.stop()


def write_notebook(path, cells):
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell("# loaded")] + [nbformat.v4.new_code_cell(c) for c in cells]
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nbformat.write(notebook, path)


def open_notebook(browser, server, name, cells, prepare=None):
    """A page of JupyterLab on notebook ``name`` (written with ``cells``), its kernel idle;
    ``prepare(page)`` runs before it loads (to route its requests)."""
    write_notebook(server.root / name, cells)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    if prepare is not None:
        prepare(page)
    page.goto(server.url(f"/lab/tree/{name}?reset"))
    page.get_by_text("# loaded").first.wait_for(timeout=60_000)
    # JupyterLab drops a run asked for before its kernel connection is up: wait for the status bar
    page.locator(".jp-StatusBar-TextItem", has_text=re.compile(r"\|\s*Idle")).first.wait_for(timeout=90_000)
    return page


def run_all(page, attempts=4):
    """Run every cell; fail at once (not at some later wait) if the marker cell did not run.

    A front end drops a run asked for before its kernel connection is up (Notebook 7's idle
    indicator can show before it is, on a loaded machine): when no cell was queued, ask again."""
    for _ in range(attempts):
        page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
        page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
        try:
            page.locator(".jp-InputPrompt", has_text=re.compile(r"\[(\*|1)\]")).first.wait_for(timeout=15_000)
            break
        except PlaywrightTimeoutError:  # nothing queued: the run was dropped
            continue
    page.locator(".jp-InputPrompt", has_text="[1]").first.wait_for(timeout=60_000)


def brightness(css_color):
    """The mean of a computed ``rgb(...)``/``rgba(...)`` colour's channels (0 dark to 255 light)."""
    parts = [float(x) for x in css_color[css_color.index("(") + 1 : css_color.index(")")].split(",")[:3]]
    return sum(parts) / 3


def switch_theme(page, name, light):
    """Pick JupyterLab theme ``name`` from the Settings menu and wait until the page wears it."""
    page.locator(".lm-MenuBar-itemLabel", has_text="Settings").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Theme").first.click()
    page.locator(".lm-Menu-itemLabel", has_text=name).first.click()
    page.wait_for_function(f"() => document.body.dataset.jpThemeLight === '{str(light).lower()}'", timeout=30_000)
    page.locator("#jupyterlab-splash").wait_for(state="detached", timeout=30_000)


def screenshot(target, name):
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    target.screenshot(path=str(path))
    return path


# The text of every log pane a person sees (drawn, visible, with a height): one under a tab bar.
VISIBLE_PANES = """() => [...document.querySelectorAll('.nl-logbox')]
    .filter(box => box.checkVisibility() && box.getBoundingClientRect().height > 0)
    .map(box => box.innerText)"""

PARKED_LAUNCH = """
import os
from notebook_launcher import launch, notebook_launcher
def chatty_then_parked():
    rank = int(os.environ["RANK"])
    for step in range({lines}):
        print(f"rank {{rank}}: step {{step}}")
    with open(os.path.join({gates!r}, "{gate}" + os.environ["RANK"])) as gate:   # a FIFO the test opens
        gate.read()
    return rank
{call}(chatty_then_parked, num_processes={ranks})
"""


def parked_launch(gates, gate, *, lines, ranks=2, blocking=True):
    """A cell whose ranks print ``lines`` lines each, then wait at FIFO ``gate<rank>`` in ``gates``;
    its launch blocks the cell (the common case) or runs in the background (the kernel stays free)."""
    call = "notebook_launcher" if blocking else "job = launch"
    return PARKED_LAUNCH.format(gates=str(gates), gate=gate, lines=lines, ranks=ranks, call=call)


def make_gates(gates, name, ranks=(0, 1)):
    """The FIFOs ``name<rank>`` in folder ``gates`` (made if missing); returns the folder."""
    gates = Path(gates)
    gates.mkdir(exist_ok=True)
    for rank in ranks:
        os.mkfifo(gates / f"{name}{rank}")
    return gates


def release_gates(gates, name, ranks=(0, 1), timeout=60):
    """Open the FIFOs ``name<rank>`` for writing (each open waits for its rank), bounded in time."""

    def release():
        for rank in ranks:
            with open(os.path.join(gates, f"{name}{rank}"), "w") as fifo:
                fifo.write("go")

    thread = threading.Thread(target=release, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), f"the ranks never reached gate {name}"


# The WCAG contrast of each element's computed text colour against what it sits on (its own or its
# nearest ancestor's background; a translucent colour is blended over it first): [{text, ratio}].
CONTRASTS = """(selector) => {
    const parse = (css) => {
        let m = css.match(/^color\\(srgb ([\\d.e-]+) ([\\d.e-]+) ([\\d.e-]+)(?: \\/ ([\\d.e-]+))?\\)$/);
        if (m) return [m[1] * 255, m[2] * 255, m[3] * 255, m[4] === undefined ? 1 : +m[4]];
        m = css.match(/rgba?\\(([\\d.]+),\\s*([\\d.]+),\\s*([\\d.]+)(?:,\\s*([\\d.]+))?\\)/);
        return [+m[1], +m[2], +m[3], m[4] === undefined ? 1 : +m[4]];
    };
    const over = (top, under) => top.slice(0, 3).map((c, i) => c * top[3] + under[i] * (1 - top[3])).concat(1);
    const background = (el) => {
        const layers = [];
        for (let e = el; e; e = e.parentElement) {
            const bg = parse(getComputedStyle(e).backgroundColor);
            if (bg[3] > 0) layers.push(bg);
            if (bg[3] === 1) break;
        }
        return layers.reverse().reduce((acc, layer) => over(layer, acc), [255, 255, 255, 1]);
    };
    const lum = (c) => {
        const channel = (v) => { v /= 255; return v <= 0.04045 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
        const [r, g, b] = c.slice(0, 3).map(channel);
        return 0.2126 * r + 0.7152 * g + 0.0722 * b;
    };
    return [...document.querySelectorAll(selector)].filter(el => el.checkVisibility()).map(el => {
        const bg = background(el);
        const fg = over(parse(getComputedStyle(el).color), bg);
        const [hi, lo] = [lum(fg), lum(bg)].sort((a, b) => b - a);
        return {text: el.textContent.trim(), ratio: (hi + 0.05) / (lo + 0.05)};
    });
}"""


def contrasts(page, selector):
    """The contrast ratio of every visible element matching ``selector``, with its text."""
    return page.evaluate(CONTRASTS, selector)
