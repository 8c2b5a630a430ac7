"""Directories and files written so that a crash at any moment leaves a complete one to load, and
nothing the library did not write is ever moved or removed.

A checkpoint directory is written as ``<dir>.tmp`` (its ``WRITING`` marker says the library made
the whole folder); its last file, ``COMPLETE``, marks it whole and lists what it holds (``markers``
says how a folder's markers are read: never from file times). Then:

- ``<dir>`` missing, empty, or holding nothing but the library's files: published with renames,
  ``<dir>`` → ``<dir>.prev``, ``<dir>.tmp`` → ``<dir>``, then the library's files of
  ``<dir>.prev`` are removed (and the folder, once empty).
- ``<dir>`` holding anything else (``save_state(os.getcwd())``: the notebook, the user's data), or
  being the process's working directory: the new files are moved *into* it one by one. The
  previous checkpoint's files (those its ``COMPLETE`` lists) are first hard-linked into a sealed
  ``<dir>.prev``; a ``WRITING`` file in ``<dir>`` lists every entry of the library's there (so a
  save after a crash knows them), the previous ``COMPLETE`` is removed, then its files that the new
  checkpoint does not have, the new files are moved in, and the new ``COMPLETE`` is written last.
  A new file (or marker) that would replace an entry the library did not write is refused
  (``FileExistsError`` naming it) before anything is touched.
- ``<dir>`` a symbolic link (a folder on a mounted drive): all of it happens at the link's target;
  the link stays.

Whatever moment a crash falls at, one of ``<dir>``, ``<dir>.prev`` or a whole ``<dir>.tmp`` is
complete, and ``resolve`` finds it (in that order of preference). Publishing never deletes the only
complete copy, and ``<dir>.tmp`` or ``<dir>.prev`` folders it did not make are refused, not removed.
A publish that fails before it touches ``<dir>`` (a full disk) removes its ``<dir>.tmp``.

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
from collections.abc import Callable, Iterable
from typing import Any, BinaryIO

from .markers import COMPLETE, MARKERS, WHOLE, WRITING, Ownership, ownership, pending_name

__all__ = [
    "begin",
    "abandon",
    "publish",
    "resolve",
    "discard",
    "atomic_file",
    "is_complete",
    "written",
    "target",
    "PartlyPublished",
    "COMPLETE",
    "WRITING",
]


class PartlyPublished(OSError):
    """``publish`` failed after it began replacing the previous checkpoint (a disk that filled as
    the new ``COMPLETE`` was written): ``resolve`` finds a complete one (the previous, in
    ``<dir>.prev``), and the next publish finishes the job."""


def target(final: str) -> str:
    """Where a checkpoint for ``final`` is written: ``final``, or what it links to.

    Raises:
        FileNotFoundError: ``final`` is a link to nothing (a drive that is not mounted).
    """
    if not os.path.islink(final):
        return final
    resolved = os.path.realpath(final)
    if not os.path.isdir(resolved):
        raise FileNotFoundError(
            f"{final} links to {resolved}, which is not a folder: mount it, create it, or save elsewhere"
        )
    return resolved


def begin(final: str) -> str:
    """A fresh ``<final>.tmp`` to write into (an unfinished one of the library's is removed).

    Raises:
        FileExistsError: ``<final>.tmp`` exists and is not the library's.
    """
    tmp = f"{target(final)}.tmp"
    _remove_ours(tmp)
    os.makedirs(tmp)
    _write_durably(os.path.join(tmp, WRITING), json.dumps(WHOLE))
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
    """Whether ``directory`` holds a complete checkpoint of the library's."""
    return written(directory) is not None


def written(directory: str) -> list[str] | None:
    """The entries of ``directory`` its ``COMPLETE`` says the library wrote; None when it holds no
    complete checkpoint of the library's."""
    return ownership(directory).complete if os.path.isdir(directory) else None


def _seal(directory: str, names: list[str]) -> None:
    """Flush every file to disk, then write the COMPLETE marker listing ``names``, flushed too."""
    for name in names:
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            with open(path, "rb") as file:
                os.fsync(file.fileno())
    _write_durably(os.path.join(directory, COMPLETE), json.dumps(names))
    if os.path.lexists(os.path.join(directory, WRITING)):
        os.remove(os.path.join(directory, WRITING))
    _fsync_dir(directory)


def publish(tmp: str, final: str) -> None:
    """Seal ``tmp`` and make it ``final``, keeping some complete checkpoint at every instant and
    every entry of ``final`` the library did not write (see the module docstring).

    Raises:
        FileExistsError: a new file would replace an entry of ``final`` the library did not write,
            or ``<final>.prev`` exists and is not the library's (``tmp`` is removed).
        PartlyPublished: it failed after it began replacing the previous checkpoint.
        OSError: it failed before (a full disk): ``final`` is as it was and ``tmp`` is removed.
    """
    final = target(final)
    names = sorted(set(os.listdir(tmp)) - set(MARKERS))
    previous = _previous(final)
    swap = previous is None or (not previous.theirs and not _is_working_directory(final))
    kept = f"{final}.prev"
    keeping = previous is not None and previous.complete is not None and not swap
    try:
        if previous is None or swap:
            _refuse_unless_ours(kept)
        else:
            _refuse_replacing(final, names, previous)
        _seal(tmp, names)
        if keeping:
            assert previous is not None
            _keep(final, kept, previous)
    except Exception:
        if keeping:
            _quietly(_remove_ours, kept)
        _quietly(_remove_ours, tmp)
        raise
    try:
        if swap:
            _swap(tmp, final, previous)
        else:
            assert previous is not None
            _move_into(tmp, final, names, previous)
    except OSError as err:
        raise PartlyPublished(err.errno, f"{err.strerror or err}; the previous checkpoint is kept") from err
    for leftover in (tmp, kept):
        _quietly(_remove_ours, leftover)


def _previous(final: str) -> Ownership | None:
    if not os.path.lexists(final):
        return None
    if not os.path.isdir(final):
        raise FileExistsError(f"{final} is a file, not a folder: the checkpoint cannot be saved there")
    return ownership(final)


def _refuse_replacing(final: str, names: list[str], previous: Ownership) -> None:
    theirs = sorted(name for name in [*names, *MARKERS] if name in previous.theirs)
    if not theirs:
        return
    why = ""
    if COMPLETE in theirs and not os.path.getsize(os.path.join(final, COMPLETE)):
        why = (
            " (its COMPLETE is empty: a marker of a release before 0.2 beside files a checkpoint never has,"
            " or a file of someone else's, so which files there are the library's cannot be told)"
        )
    raise FileExistsError(
        f"saving to {final} would replace {', '.join(theirs)}, which the library did not write{why}:"
        " save to another folder, or move them away first"
    )


def _keep(final: str, kept: str, previous: Ownership) -> None:
    """The previous complete checkpoint of ``final``, as hard links in a sealed ``kept``."""
    assert previous.complete is not None
    _remove_ours(kept)  # an older copy: ``final`` is complete, so this is not the only one
    os.makedirs(kept)
    _write_durably(os.path.join(kept, WRITING), json.dumps(WHOLE))
    files = [name for name in previous.complete if os.path.lexists(os.path.join(final, name))]
    for name in files:
        _link(os.path.join(final, name), os.path.join(kept, name))
    _seal(kept, files)


def _swap(tmp: str, final: str, previous: Ownership | None) -> None:
    kept = f"{final}.prev"
    if previous is not None and previous.complete is None:  # nothing whole there: a .prev may be the only copy
        _remove_entries(final, previous.ours)
    elif previous is not None:
        _remove_ours(kept)  # an older copy: ``final`` is complete, so this is not the only one
        os.rename(final, kept)
    os.rename(tmp, final)
    _fsync_dir(os.path.dirname(os.path.abspath(final)))
    if previous is not None and previous.complete is not None:
        _quietly(_remove_entries, kept, previous.ours)  # only what the library wrote


def _move_into(tmp: str, final: str, names: list[str], previous: Ownership) -> None:
    """Publish ``tmp``'s ``names`` inside ``final``, beside entries the library did not write."""
    _write_durably(os.path.join(final, WRITING), json.dumps(sorted({*previous.files, *names})))
    if previous.complete is not None:
        os.remove(os.path.join(final, COMPLETE))
    for name in sorted(previous.ours - {*names, *MARKERS}):  # the previous checkpoint's, and stray markers
        if os.path.lexists(os.path.join(final, name)):
            _remove(os.path.join(final, name))
    os.replace(os.path.join(tmp, COMPLETE), os.path.join(tmp, WRITING))  # a half-emptied tmp is not complete
    for name in names:
        destination = os.path.join(final, name)
        if os.path.isdir(destination) and not os.path.islink(destination):
            shutil.rmtree(destination)  # the previous checkpoint's (kept in <final>.prev)
        os.replace(os.path.join(tmp, name), destination)
    _seal(final, names)


def _is_working_directory(path: str) -> bool:
    """Whether ``path`` is this process's working directory (renaming it would strand the process)."""
    try:
        return os.path.samestat(os.stat(path), os.stat(os.curdir))
    except OSError:
        return False


def _write_durably(path: str, text: str) -> None:
    """Write ``path`` under a temporary name, flush it to disk, then rename it into place: the file
    is either absent or whole, never empty or cut short."""
    pending = os.path.join(os.path.dirname(path), pending_name(os.path.basename(path)))
    with open(pending, "w") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    os.replace(pending, path)


def _link(source: str, destination: str) -> None:
    """A copy of ``source`` at ``destination`` that costs no data: hard links (copies where the
    file system has none)."""

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    if os.path.isdir(source) and not os.path.islink(source):
        shutil.copytree(source, destination, copy_function=link)
    else:
        link(source, destination)


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.remove(path)


def _quietly(remove: Callable[..., Any], *args: Any) -> None:
    """Tidying after the checkpoint is safe (or a failure is being reported): never a new error."""
    try:
        remove(*args)
    except OSError:
        pass


def _remove_entries(path: str, names: Iterable[str]) -> bool:
    """Remove ``names`` from ``path`` (markers last, so a removal cut short stays recognisable), then
    ``path`` itself once empty; True when it is gone."""
    last = (*MARKERS, *(pending_name(marker) for marker in MARKERS))
    for name in sorted(names, key=lambda name: (name in last, name.startswith("random_states_"))):
        if os.path.lexists(os.path.join(path, name)):
            _remove(os.path.join(path, name))
    if os.listdir(path):
        return False
    os.rmdir(path)
    return True


def _refuse_unless_ours(path: str) -> Ownership | None:
    """Raise unless ``path`` is absent, an empty folder or a folder of nothing but the library's.

    Raises:
        FileExistsError: ``path`` exists and is not the library's.
    """
    if not os.path.lexists(path):
        return None
    if not os.path.isdir(path) or os.path.islink(path):
        raise FileExistsError(f"{path} is in the way of the checkpoint and was not written by it: move it away")
    found = ownership(path)
    if found.theirs:
        raise FileExistsError(f"{path} is in the way of the checkpoint and was not written by it: move it away")
    return found


def _remove_ours(path: str) -> None:
    """Remove ``path``, a folder of nothing but the library's files (or an empty one).

    Raises:
        FileExistsError: ``path`` exists and is not the library's.
    """
    found = _refuse_unless_ours(path)
    if found is not None:
        _remove_entries(path, found.ours)


def discard(path: str) -> bool:
    """Remove what the library wrote at ``path`` (a checkpoint folder being pruned) and the folder
    once nothing else is in it; True when ``path`` is gone. Entries of anyone else's stay.

    Examples:
        >>> import os, tempfile
        >>> root = tempfile.mkdtemp()
        >>> publish(begin(os.path.join(root, "ckpt")), os.path.join(root, "ckpt"))
        >>> discard(os.path.join(root, "ckpt")), os.listdir(root)
        (True, [])
    """
    if not os.path.lexists(path):
        return True
    if not os.path.isdir(path) or os.path.islink(path):
        return False
    return _remove_entries(path, ownership(path).ours)


def resolve(final: str) -> str:
    """The complete checkpoint for ``final``: ``<final>``, else ``<final>.prev``, else a sealed ``<final>.tmp``.

    Raises:
        FileNotFoundError: none of them is complete.
    """
    base = target(final)
    for candidate, found in ((final, base), (f"{base}.prev", f"{base}.prev"), (f"{base}.tmp", f"{base}.tmp")):
        if is_complete(found):
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
