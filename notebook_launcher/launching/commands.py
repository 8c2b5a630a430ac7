"""What the controller asks of the supervisor (its commands), and the clock it reads.

The controller decides (``controller``); the supervisor carries each command out on a rank group.
The controller's tests give it a clock that moves only when told (tests/unit/fake_clock.py).

Examples:
    >>> ShowStatus(1, "done")
    ShowStatus(rank=1, status='done')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..choices import RankStatus

__all__ = ["Terminate", "Kill", "AskStacks", "TellOtherNodes", "ShowStatus", "Command", "Clock"]


@dataclass(frozen=True)
class Terminate:
    """End every live rank now (SIGTERM for a local process); ``Kill`` follows after the grace period.

    ``spare``: ranks that reported (their result or their own error) and are exiting on their own.
    They are not signalled, so their exit runs whole (a queue's last items written, trackers
    flushed); ``Kill`` still ends them if they are not gone by then."""

    spare: tuple[int, ...] = ()


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
