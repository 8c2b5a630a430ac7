"""The kernel's stdout and stderr, flushed only when they hold something.

ipykernel's streams batch what a cell prints and send it from the kernel's IO thread. Flushing one
from any other thread waits for that thread (a round trip: 0.3-1 ms on a busy 2-core machine) even
when nothing was written since the last flush. Two places flush them on a launch's path:
multiprocessing before each fork (the fork starter flushes once per launch instead, with
``flush_kernel_streams``) and IPython before each display message (``skip_idle_display_flushes``).

A stream with nothing pending (ipykernel's ``_flush_pending`` and ``_subprocess_flush_pending`` are
false) is left alone: it has nothing to put before the fork or the display, and what its IO thread
is sending right then is already queued there ahead of anything sent after. Any other stream (a
``StringIO`` under ``redirect_stdout``, a terminal) is flushed as always.

Examples:
    >>> flush_kernel_streams()   # outside a kernel: a plain flush of both
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["flush_kernel_streams", "skip_idle_display_flushes"]


def flush_kernel_streams() -> None:
    """Flush ``sys.stdout`` and ``sys.stderr``, except a kernel stream with nothing pending."""
    for stream in (sys.stdout, sys.stderr):
        if _idle(stream):
            continue
        try:
            stream.flush()
        except (AttributeError, ValueError):
            pass


def skip_idle_display_flushes(shell: Any) -> None:
    """Have ``shell``'s display publisher flush the streams before a display message the way
    ``flush_kernel_streams`` does. Once per kernel; a no-op for a shell without ipykernel's
    publisher (its ``_flush_streams``)."""
    publisher = getattr(shell, "display_pub", None)
    if publisher is None or not callable(getattr(publisher, "_flush_streams", None)):
        return
    if vars(publisher).get("_flush_streams") is not flush_kernel_streams:
        publisher._flush_streams = flush_kernel_streams


def _idle(stream: Any) -> bool:
    return getattr(stream, "_flush_pending", True) is False and not getattr(stream, "_subprocess_flush_pending", False)
