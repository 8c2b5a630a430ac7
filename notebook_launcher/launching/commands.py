"""What the controller asks of the supervisor (its commands), and the clock it reads.

The controller decides (``controller``); the supervisor carries each command out on a rank group.
A ``FakeClock`` stands in for time in the controller's tests.

Examples:
    >>> clock = FakeClock(); clock.now += 1.5
    >>> clock.monotonic(), ShowStatus(1, "done")
    (1.5, ShowStatus(rank=1, status='done'))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..choices import RankStatus

__all__ = ["Terminate", "Kill", "AskStacks", "TellOtherNodes", "ShowStatus", "Command", "Clock", "FakeClock"]


@dataclass(frozen=True)
class Terminate:
    """End every live rank now (SIGTERM for a local process); ``Kill`` follows after the grace period."""


@dataclass(frozen=True)
class Kill:
    """End every live rank, and whatever a terminated one left, at once (SIGKILL)."""


@dataclass(frozen=True)
class AskStacks:
    """Ask these running ranks where they are; their answers come back as ``stacks`` events."""

    ranks: tuple[int, ...]


@dataclass(frozen=True)
class TellOtherNodes:
    """This node failed: the other nodes of a multi-node launch must end their ranks too."""

    text: str


@dataclass(frozen=True)
class ShowStatus:
    """A rank's status changed for a reason the rank did not send itself (done, failed, stopped)."""

    rank: int
    status: RankStatus


Command = Terminate | Kill | AskStacks | TellOtherNodes | ShowStatus


class Clock(Protocol):
    def monotonic(self) -> float: ...  # for deadlines

    def wall(self) -> float: ...  # for the time a failure is recorded at (the ranks' events carry theirs)


class FakeClock:
    """A clock that moves only when told (``clock.now += 1.5``); the wall clock follows it."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return 1_000_000.0 + self.now
