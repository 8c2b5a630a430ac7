"""A notebook saved while its launch runs, then reopened in every order a person meets: the page
reloaded mid-launch, the tab closed until the launch ended, the kernel killed. It never shows
"Error displaying widget"; it shows the live widget while the kernel still has it and the latest
static form otherwise. And the live widget is never redrawn while the launch runs (the reader keeps
their scroll position and selection): the kernel keeps its snapshots in files the server saves.

Real JupyterLab and Notebook 7 servers (with the package's server extension), real kernels and
Debian's Chromium. Screenshots are saved under test-artifacts/.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
import urllib.error
import urllib.request

import nbformat
import psutil
import pytest
from browser import CHROMIUM, LabServer, make_gates, open_notebook, parked_launch, release_gates, run_all, screenshot
from gates import gate_code, open_gates
from kernel_session import KernelSession

from notebook_launcher.frontend.saved_outputs import (
    SAVED_MIME,
    WIDGET_MIME,
    keep_static_forms,
    output_metadata,
    read_snapshot,
    snapshot_path,
    write_snapshot,
)

pytestmark = pytest.mark.slow  # launches saved, reopened and exported, in JupyterLab and nbconvert (see conftest.py)

needs_browser = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")


def _start_parked(browser, lab, name, blocking=True):
    """A notebook whose launch printed 200 lines a rank and waits at gate ``name``: one that blocks
    the cell (the common case), or one in the background (the kernel is free meanwhile)."""
    gates = make_gates(lab.root / "gates", name)
    page = open_notebook(browser, lab, f"{name}.ipynb", [parked_launch(gates, name, lines=200, blocking=blocking)])
    run_all(page)
    page.locator(".nl-logbox", has_text="rank 1: step 199").first.wait_for(timeout=120_000)
    page.locator(".nl-chip", has_text="rank 1: running").first.wait_for(timeout=30_000)
    # the ranks went quiet at their gates: the kernel's snapshot catches up within a second or so
    _snapshots_seen(lab.snapshots, count=1, holding="[rank 1] rank 1: step 199")
    return page, gates


def _save(page):
    page.keyboard.press("Control+s")
    page.wait_for_function("() => !document.querySelector('.jp-mod-dirty')", timeout=30_000)


def _saved_launch_output(lab, name):
    notebook = nbformat.read(lab.root / f"{name}.ipynb", as_version=4)
    outputs = [out for cell in notebook.cells for out in cell.get("outputs", []) if "notebook_launcher" in out.metadata]
    assert len(outputs) == 1, outputs
    return outputs[0]


def _snapshots_seen(folder, count, timeout=60, holding=""):
    """The contents of a running launch's snapshot file, once it has held ``count`` different ones
    (that contain ``holding``), in order; the final forms of launches that ended are not looked at."""
    seen, deadline = [], time.monotonic() + timeout
    while len(seen) < count:
        assert time.monotonic() < deadline, f"{len(seen)} snapshots holding {holding!r} in {timeout} s"
        for path in folder.glob("*.json"):
            try:
                text = path.read_text()
            except OSError:  # replaced meanwhile
                continue
            if text not in seen and holding in text and '"state": "final"' not in text:
                seen.append(text)
        time.sleep(0.05)  # polling another process's file, bounded by the deadline
    return seen


def _kernel_of(lab, name):
    sessions = json.load(urllib.request.urlopen(lab.url("/api/sessions")))
    return next(s["kernel"]["id"] for s in sessions if s["path"].endswith(f"{name}.ipynb"))


def _wait_idle(lab, kernel_id, timeout=60):
    deadline = time.monotonic() + timeout
    while json.load(urllib.request.urlopen(lab.url(f"/api/kernels/{kernel_id}")))["execution_state"] != "idle":
        assert time.monotonic() < deadline, "the kernel stayed busy"
        time.sleep(0.1)  # polling the server's view of the kernel, bounded by the deadline


def _no_widget_error(page):
    """Nothing a person sees says the widget is missing or still loading."""
    for text in ("Error displaying widget", "Loading widget"):
        assert page.locator(f"text={text} >> visible=true").count() == 0, text


def test_the_server_saves_a_launch_output_with_its_latest_snapshot(lab):
    """Through the contents API: our outputs lose the plain widget reference and take the latest
    snapshot; someone else's widget output is saved as it came."""
    name = f"{os.getpid()}-0badcafe"
    write_snapshot(snapshot_path(lab.snapshots, name), {"text/plain": "latest plain", "text/html": "<b>latest</b>"})
    widget = {WIDGET_MIME: {"version_major": 2, "version_minor": 0, "model_id": "m1"}}
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell(
            "x",
            outputs=[
                nbformat.v4.new_output("display_data", {**widget, "text/plain": "old"}, metadata=output_metadata(name)),
                nbformat.v4.new_output(
                    "display_data", {**widget, "text/plain": "kept"}, metadata=output_metadata("1-00000000")
                ),
                nbformat.v4.new_output("display_data", {**widget, "text/plain": "theirs"}),
            ],
        )
    ]
    body = json.dumps({"type": "notebook", "format": "json", "content": notebook}).encode()
    request = urllib.request.Request(lab.url("/api/contents/saved-by-api.ipynb"), data=body, method="PUT")
    urllib.request.urlopen(request).read()
    saved = nbformat.read(lab.root / "saved-by-api.ipynb", as_version=4).cells[0].outputs
    assert saved[0].data == {SAVED_MIME: {"model_id": "m1"}, "text/plain": "latest plain", "text/html": "<b>latest</b>"}
    assert saved[1].data == {SAVED_MIME: {"model_id": "m1"}, "text/plain": "kept"}  # no snapshot: as it was
    assert saved[2].data == {**widget, "text/plain": "theirs"}

    # the launch ends: its file keeps the final static form, which the next save keeps as a plain output
    write_snapshot(snapshot_path(lab.snapshots, name), {"text/plain": "final plain"}, final=True)
    notebook.cells[0].outputs = saved
    body = json.dumps({"type": "notebook", "format": "json", "content": notebook}).encode()
    request = urllib.request.Request(lab.url("/api/contents/saved-by-api.ipynb"), data=body, method="PUT")
    urllib.request.urlopen(request).read()
    assert nbformat.read(lab.root / "saved-by-api.ipynb", as_version=4).cells[0].outputs[0].data == {
        "text/plain": "final plain"
    }


def test_the_servers_export_shows_a_launch_whose_kernel_died_as_ended_and_leaves_the_file(lab):
    """A notebook saved mid-launch whose kernel then died, exported through the server (File › Save
    and Export Notebook As) without a save since: the export says the launch ended with its kernel,
    as the next save will; the file keeps what was saved. Before, the export said "running"."""
    import subprocess
    import sys

    running = {"text/plain": "launch 0b5e55ed · running · 8.3 s · as of 10:00:00, before the launch ended",
               "text/html": "<div>running · 8.3 s · as of 10:00:00, before the launch ended</div>"}  # fmt: skip
    writer = (  # a kernel that wrote its launch's snapshot, then died
        "import os, sys\nfrom notebook_launcher.frontend.saved_outputs import snapshot_path, write_snapshot\n"
        f"name = f'{{os.getpid()}}-0b5e55ed'\nwrite_snapshot(snapshot_path(sys.argv[1], name), {running!r})\n"
        "print(name)"
    )
    name = subprocess.run([sys.executable, "-c", writer, str(lab.snapshots)], capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip
    notebook = nbformat.v4.new_notebook()
    saved = {SAVED_MIME: {"model_id": "m1"}, **running}
    output = nbformat.v4.new_output("display_data", saved, metadata=output_metadata(name))
    notebook.cells = [nbformat.v4.new_code_cell("notebook_launcher(train)", outputs=[output])]
    nbformat.write(notebook, lab.root / "died.ipynb")
    exported = urllib.request.urlopen(lab.url("/nbconvert/html/died.ipynb?download=false")).read().decode()
    assert "ended with its kernel" in exported and "before the launch ended" not in exported
    assert nbformat.read(lab.root / "died.ipynb", as_version=4).cells[0].outputs[0].data == saved


def test_the_server_serves_a_launch_snapshot_to_its_own_users_only(lab):
    """The lab extension reads a launch's latest static form from the server (a notebook saved
    before the launch ended shows the final one); without the server's token, or for a name that is
    not a snapshot's, there is nothing."""
    name = f"{os.getpid()}-0ddba11e"
    write_snapshot(snapshot_path(lab.snapshots, name), {"text/plain": "the end", "text/html": "<i>end</i>"}, final=True)
    answer = json.load(urllib.request.urlopen(lab.url(f"/notebook-launcher/snapshots/{name}")))
    assert answer == {"text/plain": "the end", "text/html": "<i>end</i>", "state": "final"}
    anonymous = f"http://127.0.0.1:{lab.port}/notebook-launcher/snapshots/{name}"
    missing, odd = (lab.url(f"/notebook-launcher/snapshots/{other}") for other in ("1-00000000", "..%2Fx"))
    for url in (anonymous, missing, odd):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url)
        assert refused.value.code in (403, 404), url


@pytest.fixture()
def snapshot_kernel(tmp_path):
    """A kernel as the Jupyter server starts it: with a private snapshot folder (``(kernel, folder)``)."""
    folder = tmp_path / "snapshots"
    folder.mkdir(mode=0o700)
    kernel = KernelSession(env={"NOTEBOOK_LAUNCHER_SNAPSHOTS": str(folder)})
    yield kernel, folder
    kernel.shutdown()


def test_a_kernel_under_the_server_keeps_its_snapshots_in_a_file_not_in_the_output(snapshot_kernel, tmp_path):
    """The launch's output is written when the widget is built and at the end, never in between
    (a rewrite redraws the live widget); the snapshot file holds the latest static form, and the
    final one once the launch ended."""
    kernel, folder = snapshot_kernel
    kernel.ok("import os\nfrom notebook_launcher import launch, notebook_launcher\n" + gate_code(tmp_path))
    kernel.ok("def parked():\n    print('rank', os.environ['RANK'], 'parked')\n    wait_at_gate()\n    return 5\n")
    msg_id = kernel.submit("notebook_launcher(parked, num_processes=2, display='widget')")
    contents = _snapshots_seen(folder, count=2)
    latest = json.loads(contents[-1])
    head = latest["text/plain"].splitlines()[0]
    assert "running" in head and "before the launch ended" in head, head
    open_gates(tmp_path, [0, 1])
    ended = kernel.collect(msg_id)
    bundles = [out["display"] for out in ended.outputs if "display" in out]
    with_widget = [bundle for bundle in bundles if WIDGET_MIME in bundle]
    assert len(with_widget) == 1, f"{len(with_widget)} outputs with the widget, expected the build's only"
    assert WIDGET_MIME not in bundles[-1] and "succeeded in" in bundles[-1]["text/plain"].splitlines()[0]
    ended = read_snapshot(folder, next(folder.glob("*.json")).stem)  # the launch ended: its final form
    assert ended["state"] == "final" and ended["text/plain"] == bundles[-1]["text/plain"]


def test_a_form_whose_kernel_died_mid_launch_says_the_launch_ended_with_it(snapshot_kernel, tmp_path):
    """A notebook saved mid-launch whose kernel is then killed: the server reads the launch's last
    form as final, saying that the launch ended with its kernel and when, with no rank "running";
    the notebook's next save keeps that form (no widget to look for)."""
    kernel, folder = snapshot_kernel
    kernel.ok("import os\nfrom notebook_launcher import launch\n" + gate_code(tmp_path))
    kernel.ok("def parked():\n    print('rank', os.environ['RANK'], 'parked', flush=True)\n    wait_at_gate()")
    kernel.ok("job = launch(parked, num_processes=2, display='widget')")
    (text,) = _snapshots_seen(folder, count=1, holding="rank 1 parked")
    name = next(folder.glob("*.json")).stem
    assert read_snapshot(folder, name)["state"] == "running"  # its kernel is alive
    kernel.process.send_signal(signal.SIGKILL)
    kernel.process.wait(30)
    ended = read_snapshot(folder, name)
    assert ended["state"] == "final"
    head = ended["text/plain"].splitlines()[0]
    said = r"ended with its kernel: ran [0-9.]+ s or more, last heard of at [0-9:]{8}, gone within 1 s"
    assert re.search(said, head), head
    assert "running" not in ended["text/plain"] and "rank 1: running" not in ended["text/html"]
    assert ended["text/html"].count("rank 0: ended with the kernel") == 1
    notebook = {"cells": [{"cell_type": "code", "outputs": [{
        "output_type": "display_data", "metadata": output_metadata(name),
        "data": {WIDGET_MIME: {"model_id": "m1"}, "text/plain": json.loads(text)["text/plain"]}}]}]}  # fmt: skip
    keep_static_forms(notebook, folder)
    saved = notebook["cells"][0]["outputs"][0]["data"]
    assert SAVED_MIME not in saved and "ended with its kernel" in saved["text/plain"]


@needs_browser
def test_reloaded_mid_launch_the_live_widget_comes_back_undisturbed_by_snapshots(lab, browser):
    page, gates = _start_parked(browser, lab, "reload", blocking=False)
    # read back through the log, text selected, while the kernel takes two snapshots
    page.evaluate("""() => {
        const root = document.querySelector('.nl-root:not(.nl-static)');
        root.dataset.nlMark = 'the same view';
        const box = [...document.querySelectorAll('.nl-logbox')].find(e => e.clientHeight > 0);
        box.scrollTop = -(box.scrollHeight - box.clientHeight) / 2;
        const pre = box.querySelectorAll('.nl-loglines pre')[1];
        const range = document.createRange(); range.selectNodeContents(pre);
        window.getSelection().removeAllRanges(); window.getSelection().addRange(range);
    }""")
    where = "() => [...document.querySelectorAll('.nl-logbox')].find(e => e.clientHeight > 0).scrollTop"
    before = {"scroll": page.evaluate(where), "selection": page.evaluate("() => window.getSelection().toString()")}
    _snapshots_seen(lab.snapshots, count=2)
    assert page.evaluate("() => document.querySelector('.nl-root:not(.nl-static)').dataset.nlMark") == "the same view"
    assert page.evaluate(where) == before["scroll"] != 0
    assert page.evaluate("() => window.getSelection().toString()") == before["selection"] != ""

    # saved now: the file holds the latest snapshot and no plain widget reference
    _save(page)
    output = _saved_launch_output(lab, "reload")
    assert WIDGET_MIME not in output.data and SAVED_MIME in output.data
    assert "before the launch ended" in output.data["text/plain"].splitlines()[0]
    assert "[rank 1] rank 1: step 199" in output.data["text/plain"]

    # reloaded while the launch runs (in the background: the kernel answers): the live widget again
    page.reload()
    page.locator(".nl-logbox", has_text="rank 1: step 199").first.wait_for(timeout=60_000)
    _no_widget_error(page)
    screenshot(page.locator(".jp-OutputArea-output", has=page.locator(".nl-chip")).first, "saved-reloaded-live.png")
    # the launch ends: the widget goes, and the static form in its place is the final one (it follows
    # the server's snapshots); once it was the form saved mid-launch, "before the launch ended"
    release_gates(gates, "reload")
    page.locator(".nl-static", has_text=re.compile(r"succeeded in [0-9.]+ s")).first.wait_for(timeout=60_000)
    assert page.locator(".nl-logbox").count() == 0
    assert page.locator("text=before the launch ended >> visible=true").count() == 0
    _no_widget_error(page)
    page.close()


def test_a_snapshot_catches_up_once_the_ranks_go_quiet(snapshot_kernel, tmp_path):
    """A notebook saved while the ranks wait gets every line they wrote, not a snapshot taken
    before the last ones (the scheduled snapshots are pushed out of reach here)."""
    kernel, folder = snapshot_kernel
    kernel.ok("import os\nfrom notebook_launcher import launch\n" + gate_code(tmp_path))
    kernel.ok("import notebook_launcher.frontend.views.widget as view\nview._STATIC_FIRST = 600.0")
    kernel.ok("def parked():\n    print('rank', os.environ['RANK'], 'is at its gate')\n    wait_at_gate()")
    kernel.ok("job = launch(parked, num_processes=2, display='widget')")
    latest = _snapshots_seen(folder, count=1, holding="[rank 1] rank 1 is at its gate", timeout=30)[-1]
    assert "before the launch ended" in json.loads(latest)["text/plain"].splitlines()[0]
    open_gates(tmp_path, [0, 1])
    kernel.ok("job.wait()")


@needs_browser
def test_saved_mid_launch_and_reopened_after_it_ended_or_after_the_kernel_died(lab, browser):
    # (a) saved mid-launch, the tab closed, reopened once the launch has ended (the kernel lives on)
    page, gates = _start_parked(browser, lab, "closed")
    _save(page)
    page.close()
    release_gates(gates, "closed")
    _wait_idle(lab, _kernel_of(lab, "closed"))
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(lab.url("/lab/tree/closed.ipynb"))
    static = page.locator(".nl-static", has_text="rank 1: done").first  # the launch's final form
    static.wait_for(timeout=60_000)
    page.locator(".jp-StatusBar-TextItem", has_text=re.compile(r"\|\s*Idle")).first.wait_for(timeout=90_000)
    assert "rank 1: step 199" in static.inner_text()
    assert page.locator("text=before the launch ended >> visible=true").count() == 0
    _no_widget_error(page)
    screenshot(page.locator(".jp-OutputArea-output", has=static).first, "saved-reopened-after-end.png")
    before = (lab.root / "closed.ipynb").stat().st_mtime_ns
    page.locator(".jp-Notebook .jp-Cell").first.click()
    _save(page)  # saved again, the notebook keeps the final form as a plain output
    deadline, output = time.monotonic() + 30, None
    while output is None:  # the server writes the file in place: empty or cut short until it is done
        assert time.monotonic() < deadline, "the notebook was not saved"
        if (lab.root / "closed.ipynb").stat().st_mtime_ns != before:
            try:
                output = _saved_launch_output(lab, "closed")
            except nbformat.reader.NotJSONError:
                pass
        time.sleep(0.05)  # polling the server's write, bounded by the deadline
    assert SAVED_MIME not in output.data and "before the launch ended" not in output.data["text/plain"]
    page.close()

    # (b) saved mid-launch and the page reloaded while the cell still waits on the launch (the
    # kernel cannot answer for the widget until it ends): the saved static form, not "Loading widget"
    page, gates = _start_parked(browser, lab, "killed")
    _save(page)
    page.reload()
    static = page.locator(".nl-static", has_text="before the launch ended").first
    static.wait_for(timeout=60_000)
    assert "rank 1: step 199" in static.inner_text()
    _no_widget_error(page)
    # then the kernel is killed (out of memory, say) and the page reloaded again
    kernel_id = _kernel_of(lab, "killed")
    kernel = next(
        process
        for process in psutil.Process(lab.process.pid).children(recursive=True)
        if any(f"kernel-{kernel_id}.json" in part for part in process.cmdline())
    )
    # the server gave its kernel the snapshot folder, and nothing of what loading the package set
    environ = kernel.environ()
    assert environ["NOTEBOOK_LAUNCHER_SNAPSHOTS"] == str(lab.snapshots)
    assert "PYTORCH_NVML_BASED_CUDA_CHECK" not in environ
    os.kill(kernel.pid, signal.SIGKILL)
    kernel.wait(30)
    page.reload()  # no form will come again: the launch ended with its kernel, and the form says so
    static = page.locator(".nl-static", has_text="ended with its kernel").first
    static.wait_for(timeout=60_000)
    shown = static.inner_text()
    assert "rank 0: step 199" in shown and "last heard of at" in shown
    assert "before the launch ended" not in shown and "running" not in shown
    assert "rank 0: ended with the kernel" in shown and "rank 1: ended with the kernel" in shown
    _no_widget_error(page)
    screenshot(page.locator(".jp-OutputArea-output", has=static).first, "saved-kernel-died.png")
    page.close()
    # exported through the server without a save since (File › Save and Export Notebook As › HTML):
    # the export says what the next save will, not the "running" form the file still holds
    assert "before the launch ended" in _saved_launch_output(lab, "killed").data["text/plain"]
    exported = urllib.request.urlopen(lab.url("/nbconvert/html/killed.ipynb?download=false")).read().decode()
    assert "ended with its kernel" in exported and "rank 0: ended with the kernel" in exported
    assert "before the launch ended" not in exported

    # Notebook 7 shows both saved notebooks the same way
    notebook7 = LabServer(lab.root, app="notebook")
    try:
        for name, state in (("closed", "rank 1: done"), ("killed", "ended with its kernel")):
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(notebook7.url(f"/notebooks/{name}.ipynb"))
            page.locator(".nl-static", has_text=state).first.wait_for(timeout=60_000)
            page.locator(".nl-static", has_text="rank 1: step 199").first.wait_for(timeout=10_000)
            _no_widget_error(page)
            page.close()
    finally:
        notebook7.stop()
