"""Starting a detached launch, finding the project's detached launches, and attaching to one.

Examples:
    >>> from notebook_launcher import attach, detached_launches
    >>> [found.id for found in detached_launches()]                    # doctest: +SKIP
    ['4f1c2a9e']
    >>> job = attach("4f1c2a9e")   # its view from the first line on   # doctest: +SKIP
    >>> job.wait()                                                     # doctest: +SKIP
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import Any, NamedTuple

from ..errors import LaunchError
from .folder import LaunchFolder, detached_root, launch_folders
from .handle import DetachedLaunch

__all__ = ["start_detached", "attach", "detached_launches", "DetachedInfo"]


class DetachedInfo(NamedTuple):
    """One detached launch of the project: its id, status ("running", "succeeded", "failed",
    "stopped" or "lost": its host ended without an end) and function's name, and its folder."""

    id: str
    status: str
    function: str
    folder: str


def start_detached(plan: Any, notices: Sequence[str], view: Any) -> DetachedLaunch:
    """Start ``plan`` in a host process of its own (``detached.host``) and follow it with ``view``."""
    from ..wire.by_value import dumps

    if plan.num_nodes > 1 or plan.backend != "local":
        raise ValueError("detach=True runs the ranks on this machine: it takes one node and the local backend")
    for notice in notices:
        print(notice, file=sys.stderr)
    try:
        payload = dumps({"plan": plan, "sources": _cell_sources()})
    except Exception as err:
        raise LaunchError(
            f"detach=True: the function or its arguments cannot be pickled for the host process:"
            f" {type(err).__name__}: {err}"
        ) from err
    folder = LaunchFolder.create(os.urandom(4).hex())
    folder.write_bytes("plan.pkl", payload)
    log = folder.open_appending("host.log")
    # what this kernel imports from, the host imports from (a package added to sys.path in a cell)
    path = os.pathsep.join(entry for entry in sys.path if entry and os.path.isdir(entry))
    env = {**os.environ, "PYTHONPATH": path, "NOTEBOOK_LAUNCHER_DETACHED_DIR": os.path.dirname(folder.path)}
    try:
        # the process forks the host and exits at once: the host is no child of this kernel, and in
        # a session of its own (a kernel's restart ends the kernel's process group, not the host's)
        process = subprocess.Popen(
            [sys.executable, "-m", "notebook_launcher.detached.host", "--detach", folder.path],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
        )
    finally:
        os.close(log)
    threading.Thread(target=process.wait, name="notebook-launcher-detached-start", daemon=True).start()
    return DetachedLaunch(folder, plan).follow(view)


def _cell_sources() -> dict[str, tuple]:
    """The kernel's cells as Python's ``linecache`` holds them (files that exist nowhere else): the
    host puts them back, so the ranks' tracebacks show the lines of the cells they ran."""
    import linecache

    return {
        name: entry for name, entry in list(linecache.cache.items()) if len(entry) == 4 and not os.path.exists(name)
    }


def detached_launches(root: str | None = None) -> list[DetachedInfo]:
    """The project's detached launches (under ``detached_root()``), the oldest first.

    Examples:
        >>> import tempfile
        >>> detached_launches(tempfile.mkdtemp())
        []
    """
    found = []
    for folder in launch_folders(root):
        try:
            plan = _plan(folder)
        except Exception:  # a folder being made, or not one of ours
            continue
        function = getattr(plan.function, "__name__", "function")
        found.append(DetachedInfo(folder.id, _status(folder), function, folder.path))
    return found


def attach(launch_id: str | None = None, display: str = "auto", root: str | None = None) -> DetachedLaunch:
    """Follow a detached launch of this project in this cell: its view from its first line on, and
    ``wait()``, ``stop()``, ``logs()`` as for a launch. ``launch_id`` (or its start): which one;
    by default the newest that still runs, else the newest.

    Raises:
        LookupError: no detached launch has that id (the ones there are named).
    """
    from ..frontend.views import select_view

    folders = [folder for folder in launch_folders(root) if folder.has("plan.pkl")]
    if launch_id is not None:
        chosen = [folder for folder in folders if folder.id.startswith(launch_id)]
    else:
        running = [folder for folder in folders if _status(folder) == "running"]
        chosen = running or folders
    if not chosen:
        there = ", ".join(folder.id for folder in folders) or "none"
        which = f"detached launch {launch_id}" if launch_id is not None else "detached launch"
        raise LookupError(f"no {which} in {root or detached_root()} (there: {there})")
    folder = chosen[-1]
    plan = _plan(folder)
    return DetachedLaunch(folder, plan).follow(select_view(display, line_prefix=plan.log_line_prefix))


def _plan(folder: LaunchFolder) -> Any:
    return pickle.loads(folder.read_bytes("plan.pkl"))["plan"]


def _status(folder: LaunchFolder) -> str:
    if folder.has("end.pkl"):
        try:
            return str(pickle.loads(folder.read_bytes("end.pkl"))["status"])
        except Exception:
            return "failed"
    return "running" if folder.host_running() else "lost"
