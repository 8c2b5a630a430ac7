"""A clock that moves only when a test says so, for the pure rules that read time (the controller's).

Examples:
    >>> clock = FakeClock(); clock.now += 1.5
    >>> clock.monotonic(), clock.wall()
    (1.5, 1000001.5)
"""

from __future__ import annotations

__all__ = ["FakeClock"]


class FakeClock:
    """Moves only when told (``clock.now += 1.5``); the wall clock follows it."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return 1_000_000.0 + self.now
