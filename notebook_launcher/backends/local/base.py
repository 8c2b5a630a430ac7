"""What the supervisor drives: a ``RankGroup`` (the ranks of one attempt, wherever they run), the
``Starter`` that makes one, and, for ranks that are local processes, a started ``StartedProcess``
(a pid, a descriptor to wait on, an exit code).

A new way of running ranks (a cluster's actors, another host's processes) is a new ``RankGroup``:
the supervisor waits on its ``waitables()``, lets it ``read()`` what is ready into a ``RankSink``,
and carries the controller's commands out on it (``ask_stacks``, ``terminate``, ``kill``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ...launching.plan import LaunchPlan
    from ...rank.bootstrap import RankPipes, RankSpec

__all__ = ["Starter", "ProcessStarter", "Meeting", "Place", "RankGroup", "RankSink", "StartedProcess"]


class RankSink(Protocol):
    """Where a rank group delivers what its ranks sent, in the order they sent it."""

    def on_event(self, ranks: Sequence[int], event: Any) -> None:
        """One decoded event from the process (or actor) carrying ``ranks``; not checked yet."""

    def on_text(self, rank: int, stream: str, text: str) -> None:
        """Complete lines ``rank`` wrote to ``stream`` ("stdout" or "stderr")."""

    def on_live(self, rank: int, stream: str, text: str) -> None:
        """The unfinished last line of ``stream`` (a progress bar redrawing itself)."""

    def on_exit(self, ranks: Sequence[int], exitcode: int | None, signalled: bool, lost: str | None = None) -> None:
        """The carrier of ``ranks`` ended, after everything it sent was delivered; ``signalled``:
        this group ended it (``terminate`` or ``kill``); ``lost``: what took it, when that was not
        the rank itself (its start server died, its Ray actor or node was lost)."""


class RankGroup(Protocol):
    """The ranks of one attempt of a launch, as the supervisor drives them."""

    def start(self, specs: list[RankSpec]) -> None:
        """Start one carrier (a process, an actor) for the ranks ``specs`` describe."""

    def waitables(self) -> list[Any]:
        """What to wait on (``launching.readiness.wait_readable``) for news from the live ranks."""

    def read(self, ready: list[Any], sink: RankSink) -> None:
        """Read what the ``ready`` waitables hold and deliver it to ``sink``."""

    @property
    def live_ranks(self) -> list[int]:
        """The ranks whose carrier has not ended."""

    def ask_stacks(self, ranks: Sequence[int]) -> None:
        """Ask ``ranks`` for their stacks; the answers arrive as events."""

    def terminate(self) -> None:
        """Ask every live rank to end (SIGTERM), with whatever it started."""

    def kill(self) -> None:
        """End every live rank, and what a terminated one left, now (SIGKILL)."""

    def wait_exits(self, deadline: float | None) -> None:
        """Wait for the terminated ranks to end until ``deadline`` (monotonic), then kill the rest."""

    def close(self, sink: RankSink) -> None:
        """Everything has ended: deliver what is left, release every resource; nothing outlives it."""


@dataclass(frozen=True)
class Place:
    """Where a rank runs when its launch's ranks are not all on this machine: the node's rank in
    the launch and its address.

    Examples:
        >>> place = Place(1, "10.0.0.2")
        >>> str(place), place.short
        ('node 1 (10.0.0.2)', 'node 1')
    """

    node: int
    address: str

    def __str__(self) -> str:
        return f"node {self.node} ({self.address})"

    @property
    def short(self) -> str:
        return f"node {self.node}"


class Meeting(Protocol):
    """Where the ranks of one attempt meet (their store), and how this kernel hears of the other
    nodes' launches: the kernel's own ``backends.local.rendezvous.Rendezvous``, or a cluster's."""

    node_rank: int
    master_addr: str

    def open(self, stop_requested: Callable[[], bool], waiting: Callable[[str], None]) -> int:
        """Host or join the ranks' store before they start; its port."""

    def waitables(self) -> list:
        """What the supervisor's loop also waits on: when one is ready, it calls ``serve``."""

    def serve(self) -> None:
        """A rank wants the store (one of ``waitables`` is ready): serve it."""

    def failure_elsewhere(self) -> str | None:
        """Another node's reported failure, if any."""

    def report_failure(self, reason: str) -> None:
        """Tell the other nodes this node's launch failed."""

    def leave(self, stop_requested: Callable[[], bool], waiting: Callable[[str], None]) -> None:
        """This node's ranks have all returned."""

    def close(self) -> None:
        """Stop hosting (or leave) the store."""

    def places(self) -> dict[int, Place]:
        """Where each rank of this attempt runs, once ``open`` has returned; {} when the ranks this
        kernel drives are on its own machine."""


class StartedProcess:
    """One process a starter started (one rank; all local ranks for a torch_xla host).

    ``sentinel`` becomes readable when the process exits. It is a pidfd where Linux has them, which
    fires exactly at the rank's exit even if the rank forked children (DataLoader workers) that
    still hold the start method's own sentinel pipe; elsewhere the start method's sentinel.
    """

    lost: str | None = None  # what ended it when that was not the rank itself (its start server died)

    def __init__(self, pid: int, fallback_sentinel: int) -> None:
        self.pid = pid
        self._pidfd = _open_pidfd(pid)
        self.sentinel = self._pidfd if self._pidfd is not None else fallback_sentinel

    def wait(self, timeout: float | None = None) -> int | None:
        """Block until the process ends (at most ``timeout`` seconds); its exit code, or None."""
        raise NotImplementedError

    def release(self) -> None:
        """Reap the ended process and close every descriptor held for it."""
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


def _open_pidfd(pid):
    if not hasattr(os, "pidfd_open"):
        return None
    try:
        return os.pidfd_open(pid)
    except OSError:  # old kernel without pidfd support
        return None


class Starter(Protocol):
    """One way of starting ranks (fork, spawn, torch_xla), chosen once by ``select_starter``."""

    name: str

    def prepare(self, plan: LaunchPlan) -> None:
        """Run in the kernel before anything starts; may raise ``LaunchError``."""
        ...

    def groups(self, plan: LaunchPlan) -> list[list[int]]:
        """Which local ranks each started carrier (process, actor) carries."""
        ...

    def meeting(self, plan: LaunchPlan, attempt: int) -> Meeting:
        """Where the ranks of ``attempt`` meet (``Meeting``)."""
        ...

    def rank_group(self, plan: LaunchPlan) -> RankGroup:
        """A new, empty group of ranks for one attempt; ``RankGroup.start`` fills it."""
        ...

    def cleanup(self) -> None:
        """Release what ``prepare`` made, after every rank has ended."""
        ...


class ProcessStarter:
    """A starter whose ranks are local processes reached through pipes (``backends.local.local``):
    subclasses say how one process starts (``start``)."""

    name = "process"

    def prepare(self, plan: LaunchPlan) -> None:
        pass

    def groups(self, plan: LaunchPlan) -> list[list[int]]:
        """One process per rank."""
        return [[local] for local in range(plan.num_processes)]

    def meeting(self, plan: LaunchPlan, attempt: int) -> Meeting:
        """The kernel hosts (or joins) the store: ``backends.local.rendezvous``."""
        from .rendezvous import Rendezvous

        return Rendezvous.for_plan(plan, attempt)

    def start(self, plan: LaunchPlan, specs: list[RankSpec], pipes: RankPipes) -> StartedProcess:
        """Start one process for ``specs``; it writes to ``pipes``."""
        raise NotImplementedError

    def rank_group(self, plan: LaunchPlan) -> RankGroup:
        from .local import LocalRankGroup

        return LocalRankGroup(lambda specs, pipes: self.start(plan, specs, pipes), plan.grace_period)

    def cleanup(self) -> None:
        pass
