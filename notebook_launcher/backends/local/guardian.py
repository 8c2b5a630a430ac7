"""The guardian: when the kernel dies, every process the ranks started dies with it.

Each rank leads a process group of its own (``rank.bootstrap``), which the processes it starts
inherit: DataLoader workers, ``subprocess.Popen`` commands, a library's helper server. A rank dies
with the kernel (Linux's parent-death signal), but its processes are not the kernel's children and
would be orphaned, running on after a kernel killed for memory or restarted. So the kernel starts
one guardian, a tiny interpreter in a session of its own (out of reach of the signals that end the
kernel's process group), and tells it through a pipe which groups are alive. The pipe's only
writer is the kernel: when the kernel dies, for any reason, the guardian reads end-of-file and
sends SIGKILL to every group it was told of, and to every process the ranks started that left its
group (found by the mark in its environment, ``marked``), then exits. A guardian killed by hand
is replaced at the next message, and told every group still alive.

A rank that dies while the kernel lives has its group ended by the kernel (``reaper.end_group``).

Example (what the supervisor does for each rank)::

    watch_group(rank_pid)    # starts the guardian on first use; the rank leads group rank_pid
    ...                      # the rank exits
    reaper.end_group(rank_pid)   # what it left running ends (the kernel, at the rank's exit)
    forget_group(rank_pid)
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

from ...rank import marked

__all__ = ["watch_group", "forget_group", "GUARDIAN_MARK"]

GUARDIAN_MARK = "notebook-launcher-guardian"  # in its command line, so tools can tell it apart

_lock = threading.Lock()
_pipe: list[int] = []  # the write end, once the guardian runs
_groups: set[int] = set()  # the groups alive, told again to a guardian that replaces a killed one


def watch_group(pgid: int) -> None:
    """Have the guardian end process group ``pgid`` if the kernel dies before ``forget_group``."""
    _tell(f"+{pgid}\n", pgid, alive=True)


def forget_group(pgid: int) -> None:
    """The group ``pgid`` has ended (or is ended by the kernel): the guardian can let it go."""
    _tell(f"-{pgid}\n", pgid, alive=False)


def _tell(line: str, pgid: int, alive: bool) -> None:
    with _lock:
        if alive:
            _groups.add(pgid)
        else:
            _groups.discard(pgid)
        if not _pipe:
            _start()
        try:
            os.write(_pipe[0], line.encode())
        except OSError:  # the guardian is gone (killed by hand): start another, tell it every group
            os.close(_pipe.pop())
            _start()
            os.write(_pipe[0], "".join(f"+{group}\n" for group in sorted(_groups)).encode() or b"\n")


def _start() -> None:
    read_end, write_end = os.pipe()
    try:
        # -I: the program's folder stays off sys.path (the package's modules must not shadow the standard library)
        subprocess.Popen(
            [sys.executable, "-I", "-S", marked.__file__, GUARDIAN_MARK, str(os.getpid())],
            stdin=read_end,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # the kernel's process group may be killed as one: not this
            close_fds=True,
        )
    finally:
        os.close(read_end)
    _pipe.append(write_end)


def _forget_in_child() -> None:
    """A forked process (a rank, or a process a rank forks) must not hold the kernel's end of the
    pipe: the guardian would never see end-of-file. A launch inside a rank starts its own guardian."""
    global _lock
    _lock = threading.Lock()
    _groups.clear()
    while _pipe:
        try:
            os.close(_pipe.pop())
        except OSError:
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
