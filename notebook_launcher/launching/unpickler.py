"""Returned values are unpickled off the supervisor's thread.

Unpickling runs the value's own code (``__reduce__``, ``__setstate__``, imports), which may block
for ever. On the supervisor's thread that would stop everything else: an interrupt, a Stop, the
other ranks' events. So each value is unpickled on a thread of its own, which hands the outcome
back and wakes the supervisor; the controller bounds how long it waits (``UNPICKLE_WAIT``). A
thread that never returns stays blocked where the value's code put it (a thread cannot be ended
from outside); the launch has gone on without it.

Example::

    unpickler = Unpickler(wake=lambda: os.write(wake_w, b"u"))
    unpickler.submit(rank, payload)
    ...                                   # woken
    for rank, value, error in unpickler.take():
        ...
"""

from __future__ import annotations

import pickle
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["Unpickler"]


class Unpickler:
    """Unpickles returned values on threads of their own; ``take()`` gives the outcomes.

    Examples:
        >>> import threading
        >>> woken = threading.Event()
        >>> unpickler = Unpickler(wake=woken.set)
        >>> unpickler.submit(0, pickle.dumps([1, 2]))
        >>> woken.wait(10)
        True
        >>> unpickler.take()
        [(0, [1, 2], None)]
    """

    def __init__(self, wake: Callable[[], None]) -> None:
        self._wake = wake
        self._lock = threading.Lock()
        self._done: list[tuple[int, Any, BaseException | None]] = []

    def submit(self, rank: int, payload: bytes) -> None:
        """Start unpickling ``rank``'s value; the supervisor is woken when it is done."""
        name = f"notebook-launcher-unpickle-{rank}"
        threading.Thread(target=self._unpickle, args=(rank, payload), name=name, daemon=True).start()

    def take(self) -> list[tuple[int, Any, BaseException | None]]:
        """The outcomes since the last call: ``(rank, value, None)`` or ``(rank, None, error)``."""
        with self._lock:
            done, self._done = self._done, []
        return done

    def _unpickle(self, rank: int, payload: bytes) -> None:
        try:
            outcome: tuple[int, Any, BaseException | None] = (rank, pickle.loads(payload), None)
        except BaseException as err:  # SystemExit from a __reduce__ too: it is the value's failure
            outcome = (rank, None, err)
        with self._lock:
            self._done.append(outcome)
        self._wake()
