"""A user's listener called on a thread of its own, so that no listener can stall a launch.

The supervisor's thread reads the ranks' pipes and hands events to every listener; a user's
listener that blocked there (an ``on_output`` waiting on a lock, a slow network call) used to stop
everything behind it: the widget froze, the ranks stalled on full pipes, ``stop()`` timed out.
``DeliveredListener`` queues each event and calls the listener (guarded, ``GuardedListener``) on
its own thread, in order. The supervisor never waits for it, except for a bounded
``FINISH_WAIT`` at the end so that a listener's ``on_finish`` has run when ``wait()`` returns:

- a listener busy in one call for ``SLOW`` seconds is reported once, in the launching cell;
- one stuck that long with ``QUEUE_LIMIT`` events waiting (or with ``HARD_LIMIT`` bytes of events
  waiting, however it goes) is dropped, and reported: it misses the rest of the launch;
- one still busy when the launch ends is reported, and the launch ends without it.

The policy (``DeliveryPolicy``) is plain arithmetic on a clock, testable without threads.

Examples:
    >>> from notebook_launcher.launching.listener import GuardedListener, Output
    >>> class Lines:
    ...     seen = []
    ...     def on_output(self, event):
    ...         self.seen.append(event.text)
    >>> delivered = DeliveredListener(GuardedListener(Lines()))
    >>> delivered.on_event(Output(0, 0.0, "stdout", "hello\\n")); delivered.drained(5.0)
    True
    >>> Lines.seen
    ['hello\\n']
    >>> delivered.close()
"""

from __future__ import annotations

import contextvars
import queue
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .listener import Finished, GuardedListener, LaunchEvent, Started, hook

__all__ = ["DeliveredListener", "DeliveryPolicy", "SLOW", "QUEUE_LIMIT", "HARD_LIMIT", "FINISH_WAIT"]

SLOW = 5.0  # seconds in one call before a listener is reported as slow
QUEUE_LIMIT = 10_000  # events waiting for a listener stuck in a call before it is dropped
HARD_LIMIT = 64 << 20  # bytes of output waiting for any listener before it is dropped (memory)
FINISH_WAIT = 5.0  # seconds the end of a launch waits for a listener's on_finish


@dataclass
class DeliveryPolicy:
    """When a listener is reported slow or dropped: what its queue and its current call say.

    Examples:
        >>> policy = DeliveryPolicy()
        >>> policy.verdict(busy_for=1.0, waiting=QUEUE_LIMIT, size=1 << 20)   # behind, but not stuck
        >>> policy.verdict(busy_for=6.0, waiting=QUEUE_LIMIT, size=1 << 20)   # said before it is dropped
        'slow'
        >>> policy.verdict(busy_for=7.0, waiting=10, size=1 << 20)
        >>> policy.verdict(busy_for=9.0, waiting=QUEUE_LIMIT, size=1 << 20)
        'drop'
    """

    slow: float = SLOW
    queue_limit: int = QUEUE_LIMIT
    hard_limit: int = HARD_LIMIT
    reported_slow: bool = False

    def verdict(self, busy_for: float | None, waiting: int, size: int) -> str | None:
        """What to do about a listener ``busy_for`` seconds in its current call (None: between
        calls) with ``waiting`` events (``size`` bytes) queued: "slow" (once), "drop" or None."""
        stuck = busy_for is not None and busy_for >= self.slow
        if stuck and not self.reported_slow:
            self.reported_slow = True
            return "slow"
        if size >= self.hard_limit or (stuck and waiting >= self.queue_limit):
            return "drop"
        return None


_FLUSH = "flush"  # queued like an event: the listener's own ``flush``


def _size(event: object) -> int:
    """What an event costs to keep: its text, or a nominal size."""
    text = getattr(event, "text", None)
    return len(text) if isinstance(text, str) else 64


def _name(event: LaunchEvent | str) -> str:
    """The listener's method an event goes to, for the reports."""
    return event if isinstance(event, str) else hook(event)[0]


class DeliveredListener:
    """``guarded``'s calls, made on a thread of its own in the order they were asked for."""

    def __init__(
        self,
        guarded: GuardedListener,
        policy: DeliveryPolicy | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.guarded = guarded
        self._policy = policy or DeliveryPolicy()
        self._clock = clock
        self._queue: queue.SimpleQueue[LaunchEvent | str | None] = queue.SimpleQueue()
        self._waiting = 0
        self._size = 0  # bytes of the events waiting (their text)
        self._lock = threading.Lock()
        self._busy: tuple[str, float] | None = None  # the call in progress and when it began
        self._idle = threading.Event()
        self._idle.set()
        self._closed = False
        self._finishing = False
        context = contextvars.copy_context()  # its reports go to the launching cell, as the supervisor's do
        self._thread = threading.Thread(
            target=lambda: context.run(self._deliver), name="notebook-launcher-listener", daemon=True
        )
        self._thread.start()

    @property
    def listener(self) -> Any:
        return self.guarded.listener

    def _post(self, event: LaunchEvent | str) -> None:
        if self._closed:
            return
        busy = self._busy
        size = _size(event)
        with self._lock:
            verdict = self._policy.verdict(self._clock() - busy[1] if busy else None, self._waiting, self._size)
            if verdict != "drop":
                self._waiting += 1
                self._size += size
                self._idle.clear()
                self._queue.put(event)
        if verdict == "slow" and busy is not None:
            self._report(f"has been in {busy[0]} for {self._policy.slow:g} s; the launch goes on and its events wait")
        elif verdict == "drop":
            doing = f"has been in {busy[0]} for {self._clock() - busy[1]:.0f} s and " if busy else ""
            self._report(f"{doing}has {self._waiting} events waiting: it is no longer called and misses the rest")
            self.close()

    def _deliver(self) -> None:
        while True:
            event = self._queue.get()
            if event is None:
                return
            if not self._closed:
                self._busy = (_name(event), self._clock())
                try:
                    if isinstance(event, str):
                        self.guarded.flush()
                    else:
                        self.guarded.on_event(event)
                finally:
                    self._busy = None
            with self._lock:
                self._waiting -= 1
                self._size -= _size(event)
                if not self._waiting:
                    self._idle.set()

    def _report(self, what: str) -> None:
        print(f"notebook_launcher: the listener {self.listener!r} {what}", file=sys.stderr)

    def drained(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for every queued call to be made; whether they were."""
        return self._idle.wait(timeout)

    def close(self) -> None:
        """Call the listener no more (queued calls are dropped) and end its thread."""
        self._closed = True
        self._queue.put(None)

    def on_event(self, event: LaunchEvent) -> None:
        """Queued; ``Started`` is waited for (up to ``FINISH_WAIT`` seconds: it comes from the
        cell's thread, not the supervisor's), so a listener has its ``on_start`` when ``subscribe``
        returns; ``Finished`` is the last (``_finish``)."""
        if isinstance(event, Finished):
            self._finish(event)
            return
        self._post(event)
        if isinstance(event, Started):
            self.drained(FINISH_WAIT)

    def flush(self) -> float | None:
        """Queued too: the delay a listener's own ``flush`` returns is not waited for."""
        self._post(_FLUSH)
        return None

    def _finish(self, event: Finished) -> None:
        """The last call, once: waited for up to ``FINISH_WAIT`` seconds; the thread ends after it."""
        with self._lock:
            if self._finishing or self._closed:
                return
            self._finishing = True
        self._post(event)
        self._queue.put(None)
        if not self.drained(FINISH_WAIT):
            busy = self._busy
            self._report(
                f"was still in {busy[0] if busy else 'a call'} when the launch ended; the launch did not wait for it"
            )
