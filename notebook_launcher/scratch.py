"""The kernel's temporary files and directories, named after the kernel's pid so that those of a
kernel that died without cleaning up (killed for memory, SIGKILL) can be found and removed.

A spawn launch hands its payload (the function, its arguments: a persistent workers' token among
them) to its ranks as an ``anonymous_file``, which has no name in any folder, so no other process
finds it there; releases before 0.2 wrote it to ``notebook-launcher-<pid>-*.pkl``. Persistent
workers listen in ``notebook-launcher-workers-<pid>-*/``; the ranks' shared ``torch.compile``
caches are in ``notebook-launcher-compile-<pid>-*/`` (``compiling``). A kernel removes its own when
it is done with them; the next kernel to import the package removes those of dead kernels
(``sweep_dead_kernels``).

Examples:
    >>> path = scratch_file(".pkl")
    >>> os.path.basename(path).startswith(f"notebook-launcher-{os.getpid()}-")
    True
    >>> os.unlink(path)
"""

from __future__ import annotations

import glob
import os
import shutil
import tempfile
from collections.abc import Callable
from typing import BinaryIO

__all__ = ["scratch_file", "scratch_dir", "anonymous_file", "sweep_dead_kernels", "pid_alive"]

_FILE = "notebook-launcher-"
_KINDS = ("workers", "compile")  # the kernel's scratch folders: notebook-launcher-<kind>-<pid>-*


def scratch_file(suffix: str) -> str:
    """A new private file (mode 0600) of this kernel's; the caller writes and removes it."""
    fd, path = tempfile.mkstemp(prefix=f"{_FILE}{os.getpid()}-", suffix=suffix)
    os.close(fd)
    return path


def anonymous_file(data: bytes) -> BinaryIO:
    """A private file holding ``data`` that no folder names (``O_TMPFILE`` on Linux; elsewhere
    removed from its folder as soon as it is made): only a process handed its descriptor reads it,
    and it is gone when the last one closes it. The caller closes it.

    Examples:
        >>> file = anonymous_file(b"payload")
        >>> named = [name for name in os.listdir(tempfile.gettempdir()) if name.startswith(f"{_FILE}{os.getpid()}-")]
        >>> os.pread(file.fileno(), 7, 0), named
        (b'payload', [])
        >>> file.close()
    """
    file = tempfile.TemporaryFile(prefix=f"{_FILE}{os.getpid()}-")  # noqa: SIM115 (the caller closes it)
    file.write(data)
    file.flush()
    return file


def scratch_dir(kind: str = "workers") -> str:
    """A new private directory (mode 0700) of this kernel's, for ``kind`` (one of ``_KINDS``); the
    caller removes it.

    Examples:
        >>> path = scratch_dir("compile")
        >>> name, mode = os.path.basename(path), os.stat(path).st_mode & 0o777
        >>> name.startswith(f"notebook-launcher-compile-{os.getpid()}-"), oct(mode)
        (True, '0o700')
        >>> os.rmdir(path)
    """
    if kind not in _KINDS:
        raise ValueError(f"kind must be one of {', '.join(_KINDS)}, not {kind!r}")
    return tempfile.mkdtemp(prefix=f"{_FILE}{kind}-{os.getpid()}-")


def sweep_dead_kernels() -> int:
    """Remove the scratch files and directories of kernels that no longer run; returns how many.

    Only this user's can be removed (``/tmp`` is sticky); a pid that runs again under another
    process keeps its files, which is the safe side of a rare pid reuse.
    """
    removed = 0
    where = tempfile.gettempdir()
    found: list[tuple[str, int, Callable[[str], object]]] = [
        (path, len(_FILE), os.unlink) for path in glob.glob(os.path.join(where, _FILE + "*.pkl"))
    ]
    for kind in _KINDS:
        prefix = f"{_FILE}{kind}-"
        found += [(path, len(prefix), shutil.rmtree) for path in glob.glob(os.path.join(where, prefix + "*"))]
    for path, start, remove in found:
        pid = os.path.basename(path)[start:].split("-", 1)[0]
        try:
            if not pid.isdigit() or pid_alive(int(pid)) or os.stat(path).st_uid != os.getuid():
                continue
        except OSError:  # removed meanwhile
            continue
        try:
            remove(path)
            removed += 1
        except OSError:  # another kernel removed it first
            pass
    return removed


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` runs (one of another user's counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
