"""What a saved notebook keeps of a launch: never a reference to a widget that may be gone.

While a launch runs, its output holds the live widget's view *and* the static form. A notebook
saved then would keep a plain reference to a widget that is gone once the kernel ends or the launch
finishes, which JupyterLab and Notebook 7 show as "Error displaying widget: model not found"
instead of the static form beside it. So the Jupyter server saves our outputs with the reference
under a type of our own (``SAVED_MIME``, run as a pre-save hook by ``server_extension``): the lab
extension shows the widget while its kernel still has it (a page reloaded mid-launch) and the
static form otherwise; every other reader (nbconvert, GitHub, a front end without the extension)
knows no such type and shows the static form.

The server also tells the kernels it starts where to keep each running launch's latest static form
(``SNAPSHOTS_ENV``): a kernel then writes it there every few seconds instead of rewriting the
output — a rewrite redraws the live widget, losing the reader's scroll and selection — and the
hook saves the latest one. The output's metadata names the launch's file (``output_metadata``).
When the launch ends, the file keeps its final static form: a notebook saved mid-launch and
reopened later shows it (the lab extension asks the server for it) and its next save keeps it.
When the kernel that wrote a running launch's file is gone, the file's form is read as final,
rewritten to say that the launch ended with its kernel, and when (``views/epitaph.py``).

Examples:
    >>> notebook = {"cells": [{"cell_type": "code", "outputs": [{
    ...     "output_type": "display_data", "metadata": output_metadata("123-ab12cd34"),
    ...     "data": {WIDGET_MIME: {"model_id": "f00"}, LIVE_MIME: {}, "text/plain": "launch ab12cd34 · running"}}]}]}
    >>> keep_static_forms(notebook, snapshots=None)
    1
    >>> saved = notebook["cells"][0]["outputs"][0]["data"]
    >>> saved[SAVED_MIME], WIDGET_MIME in saved, LIVE_MIME in saved, saved["text/plain"]
    ({'model_id': 'f00'}, False, False, 'launch ab12cd34 · running')
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

__all__ = [
    "SNAPSHOTS_ENV",
    "WIDGET_MIME",
    "SAVED_MIME",
    "LIVE_MIME",
    "OUTPUT_KEY",
    "output_metadata",
    "snapshot_path",
    "keep_static_forms",
    "read_snapshot",
    "write_snapshot",
    "STATE_KEY",
    "FINAL",
    "RUNNING",
    "NOTEBOOK_KEY",
    "CELL_KEY",
    "running_launches",
]

SNAPSHOTS_ENV = "NOTEBOOK_LAUNCHER_SNAPSHOTS"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
SAVED_MIME = "application/vnd.notebook-launcher.saved-launch+json"
# In a running launch's output beside the widget, for a reader whose page cannot draw the widget (a
# collaborator: the output is not trusted on their page): the lab extension shows the latest
# snapshot there, refreshed until the launch ends. Never saved.
LIVE_MIME = "application/vnd.notebook-launcher.live-launch+json"
OUTPUT_KEY = "notebook_launcher"
STATE_KEY, FINAL, RUNNING = "state", "final", "running"  # a snapshot file's state: the launch ended or not
NOTEBOOK_KEY, CELL_KEY = "notebook", "cell"  # in a snapshot file: where the launch runs (when known)
_WRITER = "writer"  # the kernel process that wrote a snapshot file
SNAPSHOT_GAP = 1.0  # seconds, at most, between two snapshots of a running launch (after its first 2 s)
# "<kernel pid>-<launch id>" or, for a %%dist cell, "<kernel pid>-<launch id>.<call>": nothing else is read
_NAME = re.compile(r"[0-9]{1,10}-[0-9a-f]{8}(\.[0-9]{1,10})?")


def output_metadata(snapshot: str | None) -> dict:
    """The metadata of a launch's output: marks it as ours and names its snapshot file, if any.

    Examples:
        >>> output_metadata("123-ab12cd34")
        {'notebook_launcher': {'snapshot': '123-ab12cd34'}}
    """
    return {OUTPUT_KEY: {"snapshot": snapshot} if snapshot else {}}


def snapshot_path(snapshots: str | Path, name: str) -> Path:
    """The file that holds snapshot ``name``; a name not of our making is refused.

    Examples:
        >>> snapshot_path("/tmp/s", "123-ab12cd34").name
        '123-ab12cd34.json'
        >>> snapshot_path("/tmp/s", "123-ab12cd34.2").name  # a %%dist cell's call on the workers
        '123-ab12cd34.2.json'
        >>> snapshot_path("/tmp/s", "../../etc/passwd")
        Traceback (most recent call last):
        ...
        ValueError: not a snapshot name: '../../etc/passwd'
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"not a snapshot name: {name!r}")
    return Path(snapshots) / f"{name}.json"


def keep_static_forms(notebook: dict, snapshots: str | Path | None) -> int:
    """Save every launch output of ``notebook`` (nbformat 4, as JSON) with its widget reference under
    ``SAVED_MIME`` and the latest snapshot from ``snapshots`` as its static form, where there is one;
    returns how many outputs changed. Outputs that are not ours are left as they are."""
    changed = 0
    for cell in notebook.get("cells", []):
        for output in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
            mark = (output.get("metadata") or {}).get(OUTPUT_KEY)
            data = output.get("data")
            if not isinstance(mark, dict) or not isinstance(data, dict):
                continue
            if WIDGET_MIME not in data and SAVED_MIME not in data:
                continue  # a finished launch: its output is the final static form
            data.pop(LIVE_MIME, None)
            reference = data.pop(WIDGET_MIME, None)
            if isinstance(reference, dict) and isinstance(reference.get("model_id"), str):
                data[SAVED_MIME] = {"model_id": reference["model_id"]}
            latest = read_snapshot(snapshots, mark.get("snapshot")) if snapshots else None
            if latest is not None:
                if latest.pop(STATE_KEY) == FINAL:
                    data.pop(SAVED_MIME, None)  # the launch has ended: its output is the final static form
                for key in ("text/plain", "text/html"):
                    data.pop(key, None)
                data.update(latest)
            changed += 1
    return changed


def read_snapshot(snapshots: str | Path, name: Any) -> dict | None:
    """Snapshot ``name``'s static form (text/plain, text/html) and its ``STATE_KEY`` (``FINAL`` once
    the launch ended, else ``RUNNING``), or None where there is none or it is not ours.

    Examples:
        >>> import tempfile
        >>> folder = tempfile.mkdtemp()
        >>> write_snapshot(snapshot_path(folder, "1-ab12cd34"), {"text/plain": "done"}, final=True)
        >>> read_snapshot(folder, "1-ab12cd34"), read_snapshot(folder, "2-ab12cd34")
        ({'text/plain': 'done', 'state': 'final'}, None)
    """
    try:
        with open(snapshot_path(snapshots, name), encoding="utf-8") as file:
            bundle = json.load(file)
    except (ValueError, OSError):  # none written yet, swept, or not ours
        return None
    if not isinstance(bundle, dict) or not all(isinstance(value, str) for value in bundle.values()):
        return None
    static = {key: value for key, value in bundle.items() if key in ("text/plain", "text/html")}
    if not static:
        return None
    if bundle.get(STATE_KEY) == FINAL:
        return {**static, STATE_KEY: FINAL}
    if _writer_gone(name, bundle.get(_WRITER, "")):  # no later form will come: the launch ended with it
        from .views.epitaph import ended_with_kernel

        return {**ended_with_kernel(static, within=SNAPSHOT_GAP), STATE_KEY: FINAL}
    return {**static, STATE_KEY: RUNNING}


def running_launches(snapshots: str | Path, notebooks: set[str]) -> list[dict]:
    """The launches still running (their kernel alive) in any of ``notebooks`` (the paths a notebook
    may go by: as its kernel was told, relative or absolute): ``[{"name": …, "cell": …}]``, for a
    page opened on that notebook after the launch began (a reload, a second tab) to show them.

    Examples:
        >>> import tempfile
        >>> folder = tempfile.mkdtemp()
        >>> form = {"text/plain": "running", NOTEBOOK_KEY: "/home/me/a.ipynb", CELL_KEY: "c1"}
        >>> write_snapshot(snapshot_path(folder, f"{os.getpid()}-ab12cd34"), form)
        >>> [launch["cell"] for launch in running_launches(folder, {"/home/me/a.ipynb"})]
        ['c1']
        >>> running_launches(folder, {"/home/me/b.ipynb"})
        []
    """
    import psutil

    found = []
    for path in sorted(Path(snapshots).glob("*.json")):
        pid = path.stem.split("-", 1)[0]
        if not pid.isdigit() or not psutil.pid_exists(int(pid)):  # its kernel is gone: not read at all
            continue
        try:
            with open(path, encoding="utf-8") as file:
                bundle = json.load(file)
        except (ValueError, OSError):
            continue
        if not isinstance(bundle, dict) or bundle.get(NOTEBOOK_KEY) not in notebooks:
            continue
        if bundle.get(STATE_KEY) != RUNNING or _writer_gone(path.stem, str(bundle.get(_WRITER, ""))):
            continue
        found.append({"name": path.stem, "cell": str(bundle.get(CELL_KEY, ""))})
    return found


def write_snapshot(path: Path, bundle: dict, final: bool = False) -> None:
    """Write ``bundle`` (text/plain and text/html) to the snapshot file ``path``
    (``snapshot_path``), whole or not at all; ``final``: the launch has ended and this is its
    final static form."""
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    with open(partial, "w", encoding="utf-8") as file:
        json.dump({**bundle, STATE_KEY: FINAL if final else RUNNING, _WRITER: _this_process()}, file)
    os.replace(partial, path)


def _this_process() -> str:
    """This process as ``"<pid>@<start time>"``: a later process with the same pid is not it."""
    import psutil

    return f"{os.getpid()}@{psutil.Process().create_time():.2f}"


def _writer_gone(name: str, writer: str) -> bool:
    """Whether the kernel that wrote snapshot ``name`` has ended (a form from a kernel that left no
    writer record, or that is alive, is not taken for gone)."""
    import psutil

    pid, _, started = writer.partition("@")
    if not pid.isdigit() or not name.startswith(f"{pid}-"):
        return False
    try:
        return abs(psutil.Process(int(pid)).create_time() - float(started)) > 1.0
    except psutil.NoSuchProcess:
        return True
    except (psutil.Error, ValueError):  # not ours to look at: not taken for gone
        return False
