"""The kernel's interrupt belongs to its main thread, the one running the cell.

A process-wide SIGINT (JupyterLab's interrupt, sent to the kernel's process group) may be taken by
any thread that does not block it. Linux makes a thread that forks take a signal waiting for the
process (the fork is restarted after it), so a launch forking a rank from its supervisor thread can
take the interrupt meant for a cell: Python then only notes it, and a cell blocked in a lock wait
(``threading.Event().wait()``, ``job.wait()``) never wakes, or is interrupted later outside its code.
A thread also takes it while it starts, before its own code can block it (glibc starts it with
its creator's mask), and IPython restarts its history thread, stopped before every fork, from the
main thread as the next cell starts: just when a person interrupts. So the threads the launcher
starts in the kernel are born with SIGINT blocked (``kernel_thread``), a fork start blocks it for
that moment whichever thread forks (``interrupts_blocked``), and IPython's own restart of its history
thread runs with SIGINT blocked too (``history_thread_born_deaf``). (Restarting it after every launch
instead would cost the next launch a thread join before its first fork.)

A forked rank starts with SIGINT blocked, the supervisor's mask. It is still in the kernel's process
group until it leads its own, and an interrupt for the kernel's cell sent then is held, not raised in
the rank. ``take_own_interrupts`` drops it and unblocks SIGINT once the rank has its own group.

Even so another thread can take it (a plain kernel's own IOPub thread does, now and then): Python
then only notes it, for the main thread to raise at its next instruction. ``wait_event`` waits in
short slices on the main thread, so a cell waiting on a launch always sees its interrupt.

Examples:
    >>> import threading
    >>> done = threading.Event()
    >>> kernel_thread(done.set, name="example").join(5)
    >>> done.is_set()
    True
    >>> wait_event(done, timeout=1)
    True
    >>> with interrupts_blocked():
    ...     signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, set())
    True
"""

from __future__ import annotations

import _signal
import contextlib
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["kernel_thread", "interrupts_blocked", "history_thread_born_deaf", "take_own_interrupts", "wait_event"]

# the longest an interrupt that another thread took waits to be raised in a cell waiting on a launch
WAIT_SLICE = 0.2

_CAN_MASK = hasattr(signal, "pthread_sigmask")
# The C module, with plain ints: signal's wrappers turn every result into enum members, and each
# object touched after a fork (by the kernel forking its next rank, or by a rank) is a page copied.
_SIGINT = int(signal.SIGINT)
_SIGINT_ONLY = frozenset({_SIGINT})


def kernel_thread(target: Callable[..., Any], *, name: str, args: tuple = ()) -> threading.Thread:
    """Start a daemon thread running ``target(*args)`` with SIGINT blocked for its whole life; returns it."""

    thread = threading.Thread(target=target, args=args, name=name, daemon=True)
    with interrupts_blocked():  # a new thread inherits its creator's mask, from its first instruction
        thread.start()
    return thread


@contextlib.contextmanager
def interrupts_blocked(also: frozenset[int] = frozenset()) -> Iterator[None]:
    """Block SIGINT, and the signals ``also`` names, in this thread for the block (a process forked
    inside starts with them blocked)."""
    if not _CAN_MASK:
        yield
        return
    previous = _signal.pthread_sigmask(_signal.SIG_BLOCK, _SIGINT_ONLY | also)
    try:
        yield
    finally:
        _signal.pthread_sigmask(_signal.SIG_SETMASK, previous)


def wait_event(event: threading.Event, timeout: float | None = None) -> bool:
    """``event.wait(timeout)`` that an interrupt ends on the main thread, whichever thread took it."""
    if threading.current_thread() is not threading.main_thread():
        return event.wait(timeout)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = WAIT_SLICE if deadline is None else min(WAIT_SLICE, deadline - time.monotonic())
        if event.wait(max(left, 0.0)):
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return False


def history_thread_born_deaf() -> None:
    """Have IPython start its history thread (which it stops before every fork and restarts as the
    next cell starts) with SIGINT blocked; idempotent, a no-op outside IPython."""
    history = sys.modules.get("IPython.core.history")
    manager: Any = getattr(history, "HistoryManager", None)
    restart = getattr(manager, "_restart_thread_if_stopped", None)
    if restart is None or getattr(restart, "_born_deaf", False):
        return

    def restart_with_interrupts_blocked(self: Any) -> None:
        with interrupts_blocked():
            restart(self)

    restart_with_interrupts_blocked._born_deaf = True  # type: ignore[attr-defined]
    manager._restart_thread_if_stopped = restart_with_interrupts_blocked


def take_own_interrupts() -> None:
    """In a rank that now leads its own process group (main thread): drop an interrupt held since the
    fork (it was the kernel's), make SIGINT a KeyboardInterrupt and unblock it."""
    _signal.signal(_SIGINT, _signal.SIG_IGN)  # ignoring a held signal discards it
    _signal.signal(_SIGINT, _signal.default_int_handler)
    if _CAN_MASK:
        _signal.pthread_sigmask(_signal.SIG_UNBLOCK, _SIGINT_ONLY)
