"""The Jupyter server side of the package: saved notebooks keep each launch's static form.

Loaded by JupyterLab and Notebook 7 (the package installs the server configuration that enables
it). It registers ``saved_outputs.keep_static_forms`` as a pre-save hook, and gives the kernels the
server starts a private folder for their running launches' latest static forms (the environment
variable ``NOTEBOOK_LAUNCHER_SNAPSHOTS``, which kernels inherit). Snapshots of kernels that died
mid-launch stay for ``KEEP_DAYS`` days, for a later save of their notebook.

Examples:
    >>> folder = snapshots_folder()
    >>> oct(folder.stat().st_mode & 0o777)
    '0o700'
"""

from __future__ import annotations

import os
import stat
import tempfile
import time
from pathlib import Path
from typing import Any

from .saved_outputs import SNAPSHOTS_ENV, keep_static_forms

__all__ = ["snapshots_folder", "KEEP_DAYS"]

KEEP_DAYS = 7


def snapshots_folder() -> Path:
    """The snapshot folder: the one ``NOTEBOOK_LAUNCHER_SNAPSHOTS`` already names if it is this
    user's alone, else this user's in the temporary directory (mode 0700, made if missing); a folder
    that anyone else owns or can read is never used."""
    preset = os.environ.get(SNAPSHOTS_ENV)
    if preset and _private(Path(preset)):
        return Path(preset)
    folder = Path(tempfile.gettempdir()) / f"notebook-launcher-snapshots-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
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
    from .. import _NVML_CHECK_SET_HERE

    if _NVML_CHECK_SET_HERE:  # set by importing the package; the server's kernels must not inherit it
        os.environ.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)
    folder = snapshots_folder()
    _sweep(folder)
    os.environ[SNAPSHOTS_ENV] = str(folder)

    def keep_launch_outputs(model: dict, **_kwargs: Any) -> None:
        if model.get("type") == "notebook" and isinstance(model.get("content"), dict):
            keep_static_forms(model["content"], folder)

    serverapp.contents_manager.register_pre_save_hook(keep_launch_outputs)
    serverapp.log.info("notebook_launcher: saved notebooks keep each launch's static form")
