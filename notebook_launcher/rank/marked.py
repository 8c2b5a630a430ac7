"""Processes a launch started, found by the mark in their environment, whatever group or session
they moved to.

A rank leads a process group, which the processes it starts inherit; but a process may leave it
(``start_new_session=True``, ``process_group=0``, ``setsid``, a shell's job control) and outlive a
rank that was SIGKILLed, or a killed kernel, with init as its parent. What it keeps is its
environment: each rank puts ``MARK_VARIABLE=<kernel pid>/<rank pid>/`` in its own (``mark_rank``),
and every program it or its descendants start carries it. Linux shows a process's environment as
it was when the program started (``/proc/<pid>/environ``), so the rank itself, started before it
marked itself, is never found, and a process the rank forked without starting a program is not
found either (the rank's own tree and group reach those). A program started with a cleared
environment is out of reach.

This module imports only the standard library: the guardian runs it as its program
(``python -S marked.py``), and the kernel imports it.

Example::

    mark_rank(kernel_pid)                     # in a rank, before it runs the function
    kill_marked(rank_prefix(kernel_pid, pid))  # in the kernel, once that rank died abnormally
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterable

__all__ = ["MARK_VARIABLE", "mark_rank", "rank_prefix", "kernel_prefix", "marked", "kill_marked", "guard"]

MARK_VARIABLE = "NOTEBOOK_LAUNCHER_STARTED_BY"


def kernel_prefix(kernel_pid: int) -> str:
    """The mark's beginning shared by everything the ranks of kernel ``kernel_pid`` started."""
    return f"{kernel_pid}/"


def rank_prefix(kernel_pid: int, rank_pid: int) -> str:
    """The mark of what one rank started.

    Examples:
        >>> rank_prefix(10, 12), rank_prefix(10, 12).startswith(kernel_prefix(10))
        ('10/12/', True)
    """
    return f"{kernel_pid}/{rank_pid}/"


def mark_rank(kernel_pid: int) -> None:
    """Mark every program this rank starts from now on as started by it."""
    os.environ[MARK_VARIABLE] = rank_prefix(kernel_pid, os.getpid())


def marked(prefix: str) -> list[int]:
    """The pids of the processes whose mark begins with ``prefix`` (those of this user; others
    cannot be read).

    Examples:
        >>> marked(rank_prefix(0, 0))
        []
    """
    needle = f"{MARK_VARIABLE}={prefix}".encode()
    found = []
    try:
        names = os.listdir("/proc")
    except OSError:  # no /proc: nothing can be found this way
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as file:
                environment = file.read()
        except OSError:  # gone, or another user's
            continue
        if needle in environment and any(entry.startswith(needle) for entry in environment.split(b"\0")):
            found.append(int(name))
    return found


def kill_marked(prefix: str) -> list[int]:
    """SIGKILL every process whose mark begins with ``prefix``; returns their pids."""
    pids = [pid for pid in marked(prefix) if pid != os.getpid()]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return pids


def guard(kernel_pid: int, lines: Iterable[bytes], end_cgroups: Callable[[int], object] | None = None) -> None:
    """The guardian's work: follow the "+pgid"/"-pgid" lines the kernel writes; once they end (the
    kernel is gone), SIGKILL every group still alive, every process its ranks started, and
    (``end_cgroups(kernel_pid)``) everything in its ranks' cgroups."""
    groups: set[int] = set()
    for line in lines:
        try:
            pgid = int(line[1:])
        except ValueError:
            continue
        if line[:1] == b"+":
            groups.add(pgid)
        else:
            groups.discard(pgid)
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass
    kill_marked(kernel_prefix(kernel_pid))
    if end_cgroups is not None:
        end_cgroups(kernel_pid)


def _after_kernel(kernel_pid: int) -> None:
    """What the guardian removes once the kernel is gone: its ranks' cgroups (emptied first) and its
    ranks' shared compile caches (``compiling``: a kernel removes them itself at a clean exit)."""
    import glob
    import shutil
    import tempfile

    sys.path.append(os.path.dirname(os.path.abspath(__file__)))  # last: nothing here shadows the standard library
    import containers  # rank/containers.py, as a plain module: the guardian runs without the package

    root = containers.kernel_root(kernel_pid, create=False)
    if root is not None:
        containers.kill_and_remove(root)
    for folder in glob.glob(os.path.join(tempfile.gettempdir(), f"notebook-launcher-compile-{kernel_pid}-*")):
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":  # the guardian: marked.py <mark> <kernel pid>
    guard(int(sys.argv[2]), sys.stdin.buffer, _after_kernel)
