"""Since when this kernel's main shell could hear a front end: a message queued behind a running
cell is handled only once the cell ends, so a front end's silence counts from then.

The sidebar says it is alive every few seconds, and the kernel stops sending to one it has not
heard from for ``sidebar_comm.SILENT_AFTER`` seconds. Its messages are handled on the main shell
(in order with the cells), so during a launch that blocks its cell for minutes they wait in the
queue: without this, every open sidebar was dropped 90 s into such a launch.

Example:
    >>> free_since(lambda: 5.0)   # no cell has run in this process
    -inf
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["register", "free_since"]

_lock = threading.Lock()
_running = 0  # executions under way (a cell, a silent execution)
_ended_at = float("-inf")  # time.monotonic() when the last one ended
_registered: set[int] = set()


def register(ipython: Any) -> None:
    """Follow ``ipython``'s executions (once per shell)."""
    if id(ipython) in _registered:
        return
    _registered.add(id(ipython))
    ipython.events.register("pre_execute", _started)
    ipython.events.register("post_execute", _ended)


def _started() -> None:
    global _running
    with _lock:
        _running += 1


def _ended() -> None:
    global _running, _ended_at
    with _lock:
        _running = max(0, _running - 1)
        _ended_at = time.monotonic()


def free_since(clock: Callable[[], float] = time.monotonic) -> float:
    """``clock()`` while an execution runs (the shell hears nothing now), else when the last one
    ended (``-inf`` if none ran)."""
    with _lock:
        return clock() if _running else _ended_at
