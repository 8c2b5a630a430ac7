"""Directories and files written so that a crash at any moment leaves a complete one to load, and
nothing the library did not write is ever moved or removed.

A checkpoint directory is written as ``<dir>.tmp`` (a ``WRITING`` file marks it as the library's
while it is written; its last file, ``COMPLETE``, marks it whole and lists what it holds). Then:

- ``<dir>`` missing, empty, or holding nothing but a checkpoint the library wrote: published with
  renames, ``<dir>`` → ``<dir>.prev``, ``<dir>.tmp`` → ``<dir>``, remove ``<dir>.prev``.
- ``<dir>`` holding anything else (``save_state(os.getcwd())``: the notebook, the user's data): the
  new files are moved *into* it one by one. The previous checkpoint's files (those its ``COMPLETE``
  lists) are first hard-linked into a sealed ``<dir>.prev``; a ``WRITING`` file in ``<dir>`` lists
  every entry of the library's there (so a save after a crash knows them), the previous
  ``COMPLETE`` is removed, then its files that the new checkpoint does not have, the new files are
  moved in, and the new ``COMPLETE`` is written last. A new file that would replace an entry the
  library did not write is refused (``FileExistsError`` naming it) before anything is touched.

Whatever moment a crash falls at, one of ``<dir>``, ``<dir>.prev`` or a whole ``<dir>.tmp`` is
complete, and ``resolve`` finds it (in that order of preference). Publishing never deletes the only
complete copy, and ``<dir>.tmp`` or ``<dir>.prev`` folders it did not make are refused, not removed.

Examples:
    >>> import os, tempfile
    >>> root = tempfile.mkdtemp()
    >>> tmp = begin(os.path.join(root, "ckpt"))
    >>> open(os.path.join(tmp, "weights"), "w").close()
    >>> publish(tmp, os.path.join(root, "ckpt"))
    >>> os.path.basename(resolve(os.path.join(root, "ckpt"))), written(os.path.join(root, "ckpt"))
    ('ckpt', ['weights'])
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from typing import Any, BinaryIO

__all__ = ["begin", "abandon", "publish", "resolve", "atomic_file", "is_complete", "written", "COMPLETE", "WRITING"]

COMPLETE = "COMPLETE"
WRITING = "WRITING"
_MARKERS = (COMPLETE, WRITING)


def begin(final: str) -> str:
    """A fresh ``<final>.tmp`` to write into (an unfinished one of the library's is removed).

    Raises:
        FileExistsError: ``<final>.tmp`` exists and is not the library's.
    """
    tmp = f"{final}.tmp"
    _remove_ours(tmp)
    os.makedirs(tmp)
    open(os.path.join(tmp, WRITING), "w").close()
    return tmp


def abandon(tmp: str) -> None:
    """Remove an unfinished ``<final>.tmp`` that ``begin`` made (a write into it failed): a full
    disk must not stay full of a checkpoint that will never be published.

    Examples:
        >>> import os, tempfile
        >>> tmp = begin(os.path.join(tempfile.mkdtemp(), "ckpt"))
        >>> abandon(tmp); os.path.exists(tmp)
        False
    """
    _remove_ours(tmp)


def is_complete(directory: str) -> bool:
    return os.path.isfile(os.path.join(directory, COMPLETE))


def written(directory: str) -> list[str] | None:
    """The entries of ``directory`` its ``COMPLETE`` says the library wrote; None when it is not
    complete. A marker from before markers listed their files (empty) counts the entries no newer
    than it: the library wrote those before sealing, a person added the newer ones later."""
    marker = os.path.join(directory, COMPLETE)
    listed = _listed(marker)
    if listed is None or os.path.getsize(marker):  # "[]" lists nothing; only an empty file is an old marker
        return listed
    sealed = os.stat(marker).st_mtime
    return sorted(
        name
        for name in os.listdir(directory)
        if name not in _MARKERS and os.stat(os.path.join(directory, name)).st_mtime <= sealed
    )


def _listed(marker: str) -> list[str] | None:
    """The names a marker file lists ([] for an empty one), or None when there is no such file."""
    try:
        with open(marker) as file:
            text = file.read()
    except (FileNotFoundError, NotADirectoryError):
        return None
    return list(json.loads(text)) if text.strip() else []


def _seal(directory: str, names: list[str] | None = None) -> list[str]:
    """Flush every file to disk, then write the COMPLETE marker listing ``names`` (default: every
    entry but the markers), flushed too; returns the names."""
    if names is None:
        names = sorted(name for name in os.listdir(directory) if name not in _MARKERS)
    for name in names:
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            with open(path, "rb") as file:
                os.fsync(file.fileno())
    _write_durably(os.path.join(directory, COMPLETE), json.dumps(names))
    if os.path.exists(os.path.join(directory, WRITING)):
        os.remove(os.path.join(directory, WRITING))
    _fsync_dir(directory)
    return names


def publish(tmp: str, final: str) -> None:
    """Seal ``tmp`` and make it ``final``, keeping some complete checkpoint at every instant and
    every entry of ``final`` the library did not write (see the module docstring).

    Raises:
        FileExistsError: a new file would replace an entry of ``final`` the library did not write,
            or ``<final>.prev`` exists and is not the library's.
    """
    names = _seal(tmp)
    complete = written(final) if os.path.isdir(final) else None
    # else what a save that crashed while moving its files in was writing there
    ours = complete if complete is not None else _listed(os.path.join(final, WRITING)) or []
    if not os.path.exists(final) or set(os.listdir(final)) <= {*ours, *_MARKERS}:
        _swap(tmp, final)
    else:
        _move_into(tmp, final, names, ours, previous_complete=complete is not None)


def _swap(tmp: str, final: str) -> None:
    previous = f"{final}.prev"
    parent = os.path.dirname(os.path.abspath(final))
    if os.path.exists(final):
        _remove_ours(previous)  # an older copy: ``final`` is complete (or empty), so this is not the only one
        os.rename(final, previous)
    os.rename(tmp, final)
    _fsync_dir(parent)
    _remove_ours(previous)


def _move_into(tmp: str, final: str, names: list[str], ours: list[str], previous_complete: bool) -> None:
    """Publish ``tmp``'s ``names`` inside ``final``, which holds entries the library did not write;
    ``ours``: the entries of ``final`` it did (a complete previous checkpoint's, or what a save that
    crashed there was moving in)."""
    theirs = [name for name in names if os.path.lexists(os.path.join(final, name)) and name not in ours]
    if theirs:
        raise FileExistsError(
            f"saving to {final} would replace {', '.join(sorted(theirs))}, which the library did not write:"
            " save to another folder, or move them away first"
        )
    kept = f"{final}.prev"
    if previous_complete:  # keep the previous checkpoint whole as <final>.prev before touching <final>
        _remove_ours(kept)
        os.makedirs(kept)
        open(os.path.join(kept, WRITING), "w").close()
        for name in ours:
            _link(os.path.join(final, name), os.path.join(kept, name))
        _seal(kept, ours)
    _write_durably(os.path.join(final, WRITING), json.dumps(sorted({*ours, *names})))
    if previous_complete:
        os.remove(os.path.join(final, COMPLETE))
    for name in ours:
        if name not in names and os.path.lexists(os.path.join(final, name)):
            _remove(os.path.join(final, name))
    os.replace(os.path.join(tmp, COMPLETE), os.path.join(tmp, WRITING))  # a half-emptied tmp is not complete
    for name in names:
        target = os.path.join(final, name)
        if os.path.isdir(target) and not os.path.islink(target):
            shutil.rmtree(target)  # the previous checkpoint's (kept in <final>.prev)
        os.replace(os.path.join(tmp, name), target)
    _seal(final, names)
    _remove_ours(tmp)
    _remove_ours(kept)


def _write_durably(path: str, text: str) -> None:
    with open(path, "w") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())


def _link(source: str, target: str) -> None:
    """A copy of ``source`` at ``target`` that costs no data: hard links (copies where the file
    system has none)."""

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    if os.path.isdir(source) and not os.path.islink(source):
        shutil.copytree(source, target, copy_function=link)
    else:
        link(source, target)


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.remove(path)


def _remove_ours(path: str) -> None:
    """Remove ``path`` if it is a folder the library made (it holds WRITING or COMPLETE; its marker
    goes last, so a removal cut short leaves it recognisable) or an empty folder.

    Raises:
        FileExistsError: ``path`` exists and is not the library's.
    """
    if not os.path.lexists(path):
        return
    if not os.path.isdir(path) or os.path.islink(path):
        raise FileExistsError(f"{path} is in the way of the checkpoint and was not written by it: move it away")
    entries = os.listdir(path)
    if entries and not set(entries) & set(_MARKERS):
        raise FileExistsError(f"{path} is in the way of the checkpoint and was not written by it: move it away")
    for name in sorted(entries, key=lambda name: name in _MARKERS):
        _remove(os.path.join(path, name))
    os.rmdir(path)


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
