"""The Jupyter server side of the package: saved notebooks keep each launch's static form.

Loaded by JupyterLab and Notebook 7 (the package installs the server configuration that enables
it). It registers ``saved_outputs.keep_static_forms`` as a pre-save hook, and gives the kernels the
server starts a private folder for their launches' latest static forms (the environment variable
``NOTEBOOK_LAUNCHER_SNAPSHOTS``, which kernels inherit), which the lab extension reads through
``SNAPSHOT_ROUTE``, and lists the launches running in a notebook through ``RUNNING_ROUTE`` (for a page
opened after they began). Snapshots stay for ``KEEP_DAYS`` days, for a later opening or save of a
notebook saved before its launch ended (or before its kernel died). The server's exports show each
launch as its next save would (``export_forms``).

Examples:
    >>> folder = snapshots_folder()
    >>> oct(folder.stat().st_mode & 0o777)
    '0o700'
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
import time
from pathlib import Path
from typing import Any

from .saved_outputs import SNAPSHOTS_ENV, keep_static_forms, read_snapshot, running_launches

__all__ = ["snapshots_folder", "untrack_requests_beside_the_cell", "KEEP_DAYS", "SNAPSHOT_ROUTE"]

KEEP_DAYS = 7
SNAPSHOT_ROUTE = "notebook-launcher/snapshots"
RUNNING_ROUTE = "notebook-launcher/running"  # the launches running in a notebook (a page opened after they began)


def snapshots_folder() -> Path:
    """The snapshot folder: the one ``NOTEBOOK_LAUNCHER_SNAPSHOTS`` already names if it is this
    user's alone, else this user's in the temporary directory (mode 0700, made if missing); a folder
    that anyone else owns or can read is never used, and where the usual name is taken (a file put
    there, another user's folder) a new private folder is made instead."""
    preset = os.environ.get(SNAPSHOTS_ENV)
    if preset and _private(Path(preset)):
        return Path(preset)
    folder = Path(tempfile.gettempdir()) / f"notebook-launcher-snapshots-{os.getuid()}"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
    except OSError:  # a file (anyone's) holds the name, or the folder cannot be made: a private one instead
        pass
    return folder if _private(folder) else Path(tempfile.mkdtemp(prefix="notebook-launcher-snapshots-"))


def _private(folder: Path) -> bool:
    try:
        status = folder.lstat()  # a symlink is not a folder here
    except OSError:
        return False
    return stat.S_ISDIR(status.st_mode) and status.st_uid == os.getuid() and not status.st_mode & 0o077


def _sweep(folder: Path) -> None:
    oldest = time.time() - KEEP_DAYS * 86400
    for path in folder.iterdir():
        try:
            if path.stat().st_mtime < oldest:
                path.unlink()
        except OSError:  # removed meanwhile
            pass


def _load_jupyter_server_extension(serverapp: Any) -> None:
    from ..nvml_check import SET_HERE

    if SET_HERE:  # set by importing the package; the server's kernels must not inherit it
        os.environ.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)
    folder = snapshots_folder()
    _sweep(folder)
    os.environ[SNAPSHOTS_ENV] = str(folder)

    def keep_launch_outputs(model: dict, **_kwargs: Any) -> None:
        if model.get("type") == "notebook" and isinstance(model.get("content"), dict):
            keep_static_forms(model["content"], folder)

    serverapp.contents_manager.register_pre_save_hook(keep_launch_outputs)
    from jupyter_server.utils import url_path_join

    base = serverapp.web_app.settings["base_url"]
    route = url_path_join(base, SNAPSHOT_ROUTE, "([^/]+)")
    running = url_path_join(base, RUNNING_ROUTE)
    serverapp.web_app.add_handlers(
        ".*$",
        [(route, _snapshot_handler(), {"folder": folder}), (running, _running_handler(), {"folder": folder})],
    )
    untrack_requests_beside_the_cell(serverapp)
    from .export_forms import export_with_launch_forms

    export_with_launch_forms(serverapp.web_app.settings["config"])
    serverapp.log.info("notebook_launcher: saved notebooks keep each launch's static form")


# what a page sends beside a running cell: the subshell requests (control channel) and the opening
# of a comm (the sidebar's, on a subshell of its own: labextension/src/side_door.ts)
BESIDE_THE_CELL = ("create_subshell_request", "delete_subshell_request", "list_subshell_request", "comm_open")


def untrack_requests_beside_the_cell(serverapp: Any) -> list[str]:
    """Add the requests a page sends beside a running cell to the server's untracked message types;
    returns the list.

    The list is meant to hold every message type whose busy/idle is not the kernel's. The subshell
    requests (control channel) are missing from it, so the "idle" that ends one, which JupyterLab
    and Notebook 7 send when a running cell's widget first needs a subshell, made the server and
    the status bar read Idle for the rest of the cell; so did the "idle" of the sidebar's comm,
    opened on a subshell while a cell runs. Untracked, their status is not taken as the kernel's
    (the page reads the list from its configuration). A comm's opening is brief work wherever it runs.
    """
    manager = serverapp.kernel_manager
    types = list(getattr(manager, "untracked_message_types", None) or [])
    types += [kind for kind in BESIDE_THE_CELL if kind not in types]
    manager.untracked_message_types = types
    page = serverapp.web_app.settings.setdefault("page_config_data", {})
    page["untracked_message_types"] = types
    return types


def _running_handler() -> type:
    """``GET <base>/notebook-launcher/running?notebook=<path>``: the launches running in that
    notebook (``[{"name", "cell"}]``; ``path`` as the contents API names it, relative to the
    server's root), for a page opened after they began (a reload, a second tab) to follow them."""
    from jupyter_server.base.handlers import APIHandler
    from tornado import web

    class RunningHandler(APIHandler):
        def initialize(self, folder: Path) -> None:
            self.folder = folder

        @web.authenticated
        def get(self) -> None:
            path = self.get_query_argument("notebook", "")
            root = self.settings.get("server_root_dir", os.getcwd())
            names = {path, os.path.abspath(os.path.join(os.path.expanduser(root), path))} if path else set()
            self.finish(json.dumps(running_launches(self.folder, names)))

    return RunningHandler


def _snapshot_handler() -> type:
    """``GET <base>/notebook-launcher/snapshots/<name>``: a launch's latest static form and whether
    it is final, for the lab extension to show in a notebook saved before the launch ended (404 when
    there is none). Only for the server's own users, as every Jupyter API; a name is a file name of
    our making or nothing (``saved_outputs.snapshot_path``)."""
    from jupyter_server.base.handlers import APIHandler
    from tornado import web

    class SnapshotHandler(APIHandler):
        def initialize(self, folder: Path) -> None:
            self.folder = folder

        @web.authenticated
        def get(self, name: str) -> None:
            bundle = read_snapshot(self.folder, name)
            if bundle is None:
                raise web.HTTPError(404, "no such launch snapshot")
            self.finish(json.dumps(bundle))

    return SnapshotHandler
