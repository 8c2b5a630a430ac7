"""The kernel's temporary files and directories, named after the kernel's pid so that those of a
kernel that died without cleaning up (killed for memory, SIGKILL) can be found and removed.

A spawn launch writes its payload to ``notebook-launcher-<pid>-*.pkl``; persistent workers listen in
``notebook-launcher-workers-<pid>-*/``. A kernel removes its own when it is done with them; the next
kernel to import the package removes those of dead kernels (``sweep_dead_kernels``).

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

__all__ = ["scratch_file", "scratch_dir", "sweep_dead_kernels", "pid_alive"]

_FILE = "notebook-launcher-"
_DIR = "notebook-launcher-workers-"


def scratch_file(suffix: str) -> str:
    """A new private file (mode 0600) of this kernel's; the caller writes and removes it."""
    fd, path = tempfile.mkstemp(prefix=f"{_FILE}{os.getpid()}-", suffix=suffix)
    os.close(fd)
    return path


def scratch_dir() -> str:
    """A new private directory (mode 0700) of this kernel's; the caller removes it."""
    return tempfile.mkdtemp(prefix=f"{_DIR}{os.getpid()}-")


def sweep_dead_kernels() -> int:
    """Remove the scratch files and directories of kernels that no longer run; returns how many.

    Only this user's can be removed (``/tmp`` is sticky); a pid that runs again under another
    process keeps its files, which is the safe side of a rare pid reuse.
    """
    removed = 0
    where = tempfile.gettempdir()
    for pattern, remove in ((_FILE + "*.pkl", os.unlink), (_DIR + "*", shutil.rmtree)):
        for path in glob.glob(os.path.join(where, pattern)):
            name = os.path.basename(path)
            pid = name[len(_DIR) if name.startswith(_DIR) else len(_FILE) :].split("-", 1)[0]
            if not pid.isdigit() or pid_alive(int(pid)) or os.stat(path).st_uid != os.getuid():
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
