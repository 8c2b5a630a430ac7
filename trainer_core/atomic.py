"""Directories and files written so that a crash at any moment leaves a complete one to load.

A checkpoint directory is written as ``<dir>.tmp`` (its last file, ``COMPLETE``, marks it whole),
then published with renames: ``<dir>`` → ``<dir>.prev``, ``<dir>.tmp`` → ``<dir>``, remove
``<dir>.prev``. Whatever moment a crash falls at, one of ``<dir>``, ``<dir>.prev`` or a whole
``<dir>.tmp`` is complete, and ``resolve`` finds it (in that order of preference). Publishing never
deletes the only complete copy: when ``<dir>`` is missing (a crash between the renames left
``<dir>.prev``), ``<dir>.tmp`` is renamed in first and only then is ``<dir>.prev`` removed.

Examples:
    >>> import os, tempfile
    >>> root = tempfile.mkdtemp()
    >>> tmp = begin(os.path.join(root, "ckpt"))
    >>> open(os.path.join(tmp, "weights"), "w").close()
    >>> publish(tmp, os.path.join(root, "ckpt"))
    >>> os.path.basename(resolve(os.path.join(root, "ckpt")))
    'ckpt'
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from typing import Any, BinaryIO

__all__ = ["begin", "publish", "resolve", "atomic_file", "is_complete", "COMPLETE"]

COMPLETE = "COMPLETE"


def begin(final: str) -> str:
    """A fresh ``<final>.tmp`` to write into (an unfinished one from a crash is removed)."""
    tmp = f"{final}.tmp"
    if os.path.exists(tmp):
        shutil.rmtree(tmp)
    os.makedirs(tmp)
    return tmp


def is_complete(directory: str) -> bool:
    return os.path.isfile(os.path.join(directory, COMPLETE))


def _seal(directory: str) -> None:
    """Flush every file to disk, then write the COMPLETE marker (also flushed)."""
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            with open(path, "rb") as file:
                os.fsync(file.fileno())
    with open(os.path.join(directory, COMPLETE), "w") as marker:
        marker.flush()
        os.fsync(marker.fileno())
    _fsync_dir(directory)


def publish(tmp: str, final: str) -> None:
    """Seal ``tmp`` and swap it in as ``final``, keeping some complete checkpoint at every instant."""
    _seal(tmp)
    previous = f"{final}.prev"
    parent = os.path.dirname(os.path.abspath(final))
    if os.path.exists(final):
        if os.path.exists(previous):  # an older copy: ``final`` is complete, so this is not the only one
            shutil.rmtree(previous)
        os.rename(final, previous)
    os.rename(tmp, final)
    _fsync_dir(parent)
    shutil.rmtree(previous, ignore_errors=True)


def resolve(final: str) -> str:
    """The complete checkpoint for ``final``: ``<final>``, else ``<final>.prev``, else a sealed ``<final>.tmp``.

    Raises:
        FileNotFoundError: none of them is complete.
    """
    for candidate in (final, f"{final}.prev", f"{final}.tmp"):
        if is_complete(candidate):
            return candidate
    raise FileNotFoundError(f"no complete checkpoint at {final!r}")


def atomic_file(path: str, write: Callable[[BinaryIO], Any]) -> None:
    """``write(file)`` into ``path.tmp``, fsync, then rename over ``path``."""
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as file:
        write(file)
        file.flush()
        os.fsync(file.fileno())
    os.replace(tmp, path)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
