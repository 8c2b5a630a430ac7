"""The processes a rank starts end with it: none outlives its launch.

A rank may start processes of its own (DataLoader workers, a shell command, a library's helper
server or, as Lightning's subprocess launcher does outside torchrun, copies of the program itself).
If one of them outlived the rank it would keep running, orphaned, after the cell has returned, and
could hold ports or files the next launch needs. So a rank

* becomes a *child subreaper* (Linux): a descendant whose own parent exits is re-parented to the
  rank instead of to init, so the rank still sees it;
* ends every descendant when its function is done (SIGTERM, then SIGKILL after ``grace`` seconds),
  before it exits itself.

A rank that is ended by the kernel has its whole tree signalled by the kernel's reaper.

Examples:
    >>> import subprocess
    >>> child = subprocess.Popen(["sleep", "30"])
    >>> has_descendants()
    True
    >>> child.kill(); child.wait()
    -9
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

__all__ = ["PRCTL", "become_subreaper", "end_descendants", "has_descendants"]

_PR_SET_CHILD_SUBREAPER = 36
# Resolved once, in the kernel: a forked rank that looked it up would touch (and copy) ctypes' objects.
PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None


def become_subreaper() -> None:
    """Have orphaned descendants of this process re-parented to it (a no-op off Linux)."""
    if PRCTL is not None:
        PRCTL(_PR_SET_CHILD_SUBREAPER, 1)


def has_descendants() -> bool:
    """Whether this process has any child, live or not yet reaped. One ``waitid`` call (it reaps
    nothing): a subreaper's descendants are all its children or below a live child of it."""
    if hasattr(os, "waitid"):
        try:
            os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return False
        except OSError:  # not answerable here: look in /proc
            pass
        else:
            return True
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:  # no /proc: ask psutil
        return True
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/children") as file:
                if file.read().strip():
                    return True
        except OSError:  # a thread that just ended, or a kernel without the children file
            return bool(_psutil_children())
    return False


def end_descendants(grace: float) -> None:
    """SIGTERM every descendant of this process, SIGKILL those left after ``grace`` seconds, reap them."""
    if not has_descendants():
        return
    import psutil

    doomed = _psutil_children()
    for process in doomed:
        _signal(process, signal.SIGTERM)
    _, alive = psutil.wait_procs(doomed, timeout=grace)
    for process in alive + _psutil_children():  # and any started meanwhile
        _signal(process, signal.SIGKILL)
    psutil.wait_procs(_psutil_children(), timeout=grace)


def _psutil_children() -> list:
    import psutil

    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []


def _signal(process, signum: int) -> None:
    import psutil

    try:
        process.send_signal(signum)
    except psutil.Error:
        pass
