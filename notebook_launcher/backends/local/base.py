"""The local backend's ranks: a ``StartedProcess`` (a pid, a descriptor to wait on, an exit code)
and the ``ProcessStarter`` that starts one per rank and reaches it through pipes.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ...compiling import compile_environment, forget_attempt
from ...wire.shared_tensors import new_prefix, remove_leftovers, sweep_dead_kernels
from ...wire.spec import RankSpec
from ..base import Meeting, RankGroup

if TYPE_CHECKING:
    from ...wire.spec import RankPipes, RankSeat
    from ..plans import LaunchPlan

__all__ = ["ProcessStarter", "StartedProcess"]


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


class ProcessStarter:
    """A starter whose ranks are local processes reached through pipes (``backends.local.rank_group``):
    subclasses say how one process starts (``start``)."""

    name = "process"
    _tensor_prefix: str | None = None  # this attempt's, once a spec was made
    _attempt: str | None = None  # this attempt's name in the compile cache's marks, once a spec was made

    def prepare(self, plan: LaunchPlan) -> None:
        pass

    def groups(self, plan: LaunchPlan) -> list[list[int]]:
        """One process per rank."""
        return [[local] for local in range(plan.num_processes)]

    def meeting(self, plan: LaunchPlan, attempt: int) -> Meeting:
        """The kernel hosts (or joins) the store: ``backends.local.rendezvous``."""
        from .rendezvous import Rendezvous

        return Rendezvous.for_plan(plan, attempt)

    def rank_spec(self, plan: LaunchPlan, seat: RankSeat) -> RankSpec:
        """A local process's spec: this kernel's pid, the plan's thread budget, the kernel's compile
        cache (the local ranks of every launch of the kernel share it, and mark there the graphs
        this attempt compiled: ``compiling``) and this attempt's /dev/shm prefix for large
        returned tensors (``wire.shared_tensors``), removed in ``cleanup`` with whatever a rank
        left under it, as the attempt's marks are."""
        if self._attempt is None:
            self._tensor_prefix, self._attempt = new_prefix(), os.urandom(6).hex()
            _sweep_once()
        return RankSpec(
            seat.rank,
            seat.local_rank,
            {**seat.env, **compile_environment(attempt=self._attempt)},
            os.getpid(),
            plan.threads,
            self._tensor_prefix,
            launcher_pid=os.getpid(),
            flush_interval=plan.flush_interval,
        )

    def start(self, plan: LaunchPlan, specs: list[RankSpec], pipes: RankPipes) -> StartedProcess:
        """Start one process for ``specs``; it writes to ``pipes``."""
        raise NotImplementedError

    def rank_group(self, plan: LaunchPlan) -> RankGroup:
        from .rank_group import LocalRankGroup

        return LocalRankGroup(lambda specs, pipes: self.start(plan, specs, pipes), plan.grace_period)

    def cleanup(self) -> None:
        if self._tensor_prefix is not None:
            remove_leftovers(self._tensor_prefix)
        if self._attempt is not None:
            forget_attempt(self._attempt)
        self._tensor_prefix = self._attempt = None


_swept = False


def _sweep_once() -> None:
    """On this kernel's first launch, remove the shared tensors of kernels that died holding some."""
    global _swept
    if not _swept:
        _swept = True
        sweep_dead_kernels()
