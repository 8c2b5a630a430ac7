"""Ending process trees: SIGTERM, then SIGKILL to whatever is left (when is the controller's call).

A rank may have started processes of its own (DataLoader workers, a compiler, a shell); they are
ended with it. The reaper remembers every process it signalled, so none outlives the launch even
when its rank exits first.

Examples:
    >>> reaper = Reaper(grace_period=2.0)
    >>> reaper.terminate([])      # nothing to end
    >>> reaper.end_stragglers()
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable

import psutil

__all__ = ["Reaper", "process_tree", "end_group"]


class Reaper:
    def __init__(self, grace_period: float) -> None:
        self.grace_period = grace_period  # how long end_stragglers waits before SIGKILL
        self._doomed: list[psutil.Process] = []
        self._groups: set[int] = set()  # process groups led by signalled ranks (``rank.bootstrap``)

    def terminate(self, pids: Iterable[int]) -> None:
        """SIGTERM every process tree rooted at ``pids`` and the process group each leads."""
        for pid in pids:
            tree = process_tree(pid)
            self._doomed.extend(tree)
            self._groups.add(pid)
            for process in tree:
                _signal(process, signal.SIGTERM)
            _signal_group(pid, signal.SIGTERM)

    def kill(self, pids: Iterable[int]) -> None:
        """SIGKILL the trees rooted at ``pids`` and every process signalled before."""
        for pid in pids:
            self._doomed.extend(process_tree(pid))
            self._groups.add(pid)
        for process in self._doomed:
            _signal(process, signal.SIGKILL)
        for group in self._groups:
            _signal_group(group, signal.SIGKILL)

    def end_stragglers(self) -> None:
        """Descendants of ended ranks must not survive them: wait out the grace, then SIGKILL."""
        alive = [process for process in self._doomed if _running(process)]
        if alive:
            _, alive = psutil.wait_procs(alive, timeout=self.grace_period)
            for process in alive:
                _signal(process, signal.SIGKILL)
            psutil.wait_procs(alive, timeout=5)
        for group in self._groups:  # what joined a group after its rank was signalled
            _signal_group(group, signal.SIGKILL)


def process_tree(pid: int) -> list[psutil.Process]:
    """The process ``pid`` and all its descendants ([] once it is gone)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _signal(process: psutil.Process, signum: int) -> None:
    try:
        process.send_signal(signum)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        pass


def end_group(pgid: int) -> None:
    """SIGKILL what is left of a dead rank's process group (its own processes, orphaned now)."""
    _signal_group(pgid, signal.SIGKILL)


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except OSError:  # the group has ended (or the rank never led one)
        pass


def _running(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
