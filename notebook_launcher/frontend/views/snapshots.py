"""Where a running launch keeps its latest static form, for a notebook saved before it ends.

Two ways, behind one small interface (``Snapshots``), picked by ``snapshots_for``:

* ``FileSnapshots`` — under a Jupyter server that runs the package's server extension (JupyterLab,
  Notebook 7): the static form goes to a private file every few seconds and the server saves it in
  place of the widget. The output itself is never rewritten, so the live widget is never redrawn
  and the reader keeps their scroll position and selection.
* ``OutputSnapshots`` — anywhere else (Colab, Kaggle, VS Code, a server without the extension): the
  output itself is rewritten with the widget and the static form, ever more rarely (each rewrite
  redraws the widget), so a notebook saved mid-launch still holds a recent static form.

Examples:
    >>> snapshots = snapshots_for("ab12cd34", environ={})
    >>> type(snapshots).__name__, snapshots.metadata
    ('OutputSnapshots', {'notebook_launcher': {}})
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Protocol

from ..saved_outputs import (
    CELL_KEY,
    LIVE_MIME,
    NOTEBOOK_KEY,
    SNAPSHOT_GAP,
    SNAPSHOTS_ENV,
    WIDGET_MIME,
    output_metadata,
    snapshot_path,
    write_snapshot,
)

__all__ = ["Snapshots", "FileSnapshots", "OutputSnapshots", "snapshots_for", "launch_place"]


class Snapshots(Protocol):
    metadata: dict  # the launch output's metadata, on every version of it
    longest: float  # the longest gap between two snapshots, in seconds
    settles: bool  # also taken once the ranks go quiet (cheap: no redraw), so a save then has it all
    live: bool  # the server serves them: pages that cannot draw the widget show them as they come

    def keep(self, handle: Any, static: dict, model_id: str) -> None:
        """Keep ``static`` as the launch's latest static form (the widget is ``model_id``)."""

    def end(self, static: dict) -> None:
        """The launch's output now holds its final static form ``static``: a notebook saved before
        holds an older one, so keep this one where that notebook finds it."""


def widget_output(static: dict, model_id: str, live: bool = False) -> dict:
    """The output's bundle while the widget lives: the widget's view and the static form, and with
    ``live`` the mark for pages that cannot draw the widget to show the server's latest snapshot.

    Examples:
        >>> sorted(widget_output({"text/plain": "running"}, "f00", live=True))  # doctest: +NORMALIZE_WHITESPACE
        ['application/vnd.jupyter.widget-view+json', 'application/vnd.notebook-launcher.live-launch+json',
         'text/plain']
    """
    bundle = {**static, WIDGET_MIME: {"version_major": 2, "version_minor": 0, "model_id": model_id}}
    if live:
        bundle[LIVE_MIME] = {}
    return bundle


class OutputSnapshots:
    longest = 60.0
    settles = False
    live = False

    def __init__(self) -> None:
        self.metadata = output_metadata(None)

    def keep(self, handle: Any, static: dict, model_id: str) -> None:
        handle.update(widget_output(static, model_id), raw=True, metadata=self.metadata)

    def end(self, static: dict) -> None:
        pass


class FileSnapshots:
    """Each form in a file of the server's folder, with where the launch runs (``place``: the
    notebook and the cell), so a page opened on that notebook later (a reload, a second tab) finds
    the launch even where its output was never saved."""

    longest = SNAPSHOT_GAP
    settles = True
    live = True

    def __init__(self, folder: str, launch_id: str, place: Mapping[str, str] | None = None) -> None:
        name = f"{os.getpid()}-{launch_id}"
        self.path = snapshot_path(folder, name)
        self.metadata = output_metadata(name)
        self.place = dict(place or {})

    def keep(self, handle: Any, static: dict, model_id: str) -> None:
        self._write(static, final=False)

    def end(self, static: dict) -> None:
        self._write(static, final=True)  # the server's sweep removes it after KEEP_DAYS

    def _write(self, static: dict, final: bool) -> None:
        try:
            write_snapshot(self.path, {**static, **self.place}, final=final)
        except OSError:  # the folder went away (tmp cleaned): the saved copy keeps the last one
            pass


def snapshots_for(launch_id: str, environ: Mapping[str, str] = os.environ) -> Snapshots:
    """``FileSnapshots`` when the kernel's Jupyter server saves them (it names their folder in
    ``NOTEBOOK_LAUNCHER_SNAPSHOTS``), else ``OutputSnapshots``."""
    folder = environ.get(SNAPSHOTS_ENV, "")
    if folder and os.path.isdir(folder) and os.access(folder, os.W_OK):
        return FileSnapshots(folder, launch_id, launch_place(environ))
    return OutputSnapshots()


def launch_place(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """Where the cell running now sits: its notebook (``JPY_SESSION_NAME``, which the Jupyter server
    gives its kernels) and its cell's id (JupyterLab and Notebook 7 send it with each run); what is
    not known is left out. Called on the cell's thread.

    Examples:
        >>> launch_place({"JPY_SESSION_NAME": "/home/me/train.ipynb"})
        {'notebook': '/home/me/train.ipynb'}
    """
    place = {}
    if environ.get("JPY_SESSION_NAME"):
        place[NOTEBOOK_KEY] = environ["JPY_SESSION_NAME"]
    try:
        from IPython import get_ipython

        kernel = getattr(get_ipython(), "kernel", None)
        parent = kernel.get_parent("shell") if kernel is not None else {}
        cell = (parent or {}).get("metadata", {}).get("cellId")
    except Exception:  # no kernel (a script), or one without parents per channel
        cell = None
    if isinstance(cell, str) and cell:
        place[CELL_KEY] = cell
    return place
