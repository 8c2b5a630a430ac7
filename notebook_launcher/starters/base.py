"""The starter interface, and a started worker process as the supervisor sees it (a pid, a
descriptor to wait on, an exit code)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..launching.plan import LaunchPlan
    from ..rank.bootstrap import RankSpec, WorkerPipes

__all__ = ["Starter", "WorkerProcess"]


class WorkerProcess:
    """One started worker process (one rank; all local ranks for a torch_xla host).

    ``sentinel`` becomes readable when the process exits. It is a pidfd where Linux has them, which
    fires exactly at the rank's exit even if the rank forked children (DataLoader workers) that
    still hold the start method's own sentinel pipe; elsewhere the start method's sentinel.
    """

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
    """One way of starting worker processes (fork, spawn, torch_xla), chosen once by ``select_starter``."""

    name: str

    def prepare(self, plan: LaunchPlan) -> None:
        """Run in the kernel before anything starts; may raise ``LaunchError``."""
        ...

    def groups(self, plan: LaunchPlan) -> list[list[int]]:
        """Which local ranks each started worker process carries."""
        ...

    def start(self, plan: LaunchPlan, specs: list[RankSpec], pipes: WorkerPipes) -> WorkerProcess:
        """Start one worker process for ``specs``; it writes to ``pipes``."""
        ...

    def cleanup(self) -> None:
        """Release what ``prepare`` made, after every worker has ended."""
        ...
