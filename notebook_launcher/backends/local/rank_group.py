"""The ranks of one attempt as local processes: pipes read without blocking, pidfds waited on,
process trees ended with SIGTERM then SIGKILL (a ``RankGroup``, in the style of torch elastic's
``PContext``).

Each started process leads its own process group (``rank.bootstrap``): the guardian ends the group
if the kernel dies, and the kernel ends what is left of it as soon as the rank exits, before the
rank is reaped (so its pid cannot name another group yet). Where this machine lets the user make
cgroups, each started process also gets one of its own (``rank.containers``), which its
descendants cannot leave, whatever they do to their group, session, environment or title: the
kernel empties and removes it when the rank exits, the guardian when the kernel dies.

Examples:
    >>> group = LocalRankGroup(start=lambda specs, pipes: None, grace_period=2.0)
    >>> group.live_ranks, group.waitables()
    ([], [])
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import threading
import time
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING

from ...rank import containers
from ...rank.marked import kill_marked, rank_prefix
from ...wire import STACKS_SIGNAL
from ..base import RankSink
from .base import StartedProcess
from .guardian import forget_group, watch_group
from .piped_group import PipedRankGroup
from .pipes import RankProcess, close_pipes, make_pipes
from .reaper import Reaper, end_group

if TYPE_CHECKING:
    from ...wire.spec import RankPipes, RankSpec

__all__ = ["LocalRankGroup"]

_START_LOCK = threading.Lock()  # a fork must not copy another launch's half-made pipes


def _fresh_start_lock() -> None:
    """A process forked while a launch held the start lock (a launch from inside a rank) must not
    inherit it taken: it would wait for it for ever."""
    global _START_LOCK
    _START_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_start_lock)

_cgroup_root: dict[int, str | None] = {}  # this process's folder of rank cgroups (None: none here), by pid
_cgroup_names = itertools.count()


def _rank_cgroup() -> str | None:
    """A new cgroup for one rank process, or None where no cgroup can be made here."""
    pid = os.getpid()  # a launch from inside a rank has a folder of its own
    if pid not in _cgroup_root:
        _cgroup_root[pid] = containers.kernel_root()
    root = _cgroup_root[pid]
    return containers.new_cgroup(root, f"rank-{next(_cgroup_names)}") if root is not None else None


class LocalRankGroup(PipedRankGroup):
    """Local rank processes started by ``start(specs, pipes)`` (one of the process starters)."""

    def __init__(self, start: Callable[[list[RankSpec], RankPipes], StartedProcess], grace_period: float) -> None:
        super().__init__()
        self._start = start
        self._reaper = Reaper(grace_period)
        self._cgroups: dict[int, str] = {}  # a started process's pid -> its cgroup

    def start(self, specs: list[RankSpec]) -> None:
        cgroup = _rank_cgroup()
        if cgroup is not None:
            specs = [dataclasses.replace(spec, cgroup=cgroup) for spec in specs]
        with _START_LOCK:
            ours, theirs = make_pipes()
            try:
                process = self._start(specs, theirs)
            except BaseException:
                close_pipes(ours)
                if cgroup is not None:
                    containers.kill_and_remove(cgroup)
                raise
            finally:
                close_pipes(theirs)
        if cgroup is not None:
            self._cgroups[process.pid] = cgroup
        watch_group(process.pid)
        self._processes.append(RankProcess([spec.rank for spec in specs], process, ours))

    def pids(self) -> dict[int, int]:
        """Each live rank's process (a process that carries several ranks, a torch_xla host, is not
        one rank's)."""
        return {process.ranks[0]: process.process.pid for process in self._live() if len(process.ranks) == 1}

    def ask_stacks(self, ranks: Sequence[int]) -> None:
        for process in self._live():
            if any(rank in ranks for rank in process.ranks):
                try:
                    os.kill(process.process.pid, STACKS_SIGNAL)
                except ProcessLookupError:
                    pass

    def terminate(self, spare: Collection[int] = ()) -> None:
        live = self._signal_live(spare)
        self._reaper.terminate(process.process.pid for process in live)

    def kill(self) -> None:
        live = self._signal_live()
        self._reaper.kill(process.process.pid for process in live)

    def wait_exits(self, deadline: float | None) -> None:
        for process in self._live():
            remaining = max(0.0, (deadline or time.monotonic()) - time.monotonic())
            code = process.process.wait(remaining)
            if code is None:
                self.kill()
                code = process.process.wait()
            process.exitcode = code

    def close(self, sink: RankSink) -> None:
        self._reaper.end_stragglers()
        for process in self._processes:
            end_group(process.process.pid)
            forget_group(process.process.pid)
            if process.pipes:  # not through ``_on_exit`` (ended at shutdown), which ends these itself
                _end_what_left_the_group(process)
            self._end_cgroup(process)
            process.drain_and_close(sink)
            process.process.release()

    def _on_exit(self, process: RankProcess, sink: RankSink) -> None:
        end_group(process.process.pid)  # what the rank started, before its pid can be reused
        self._end_cgroup(process)
        super()._on_exit(process, sink)
        _end_what_left_the_group(process)

    def _end_cgroup(self, process: RankProcess) -> None:
        """Kill what is left in the rank's cgroup (it has exited: whatever is there escaped it) and remove it."""
        cgroup = self._cgroups.pop(process.process.pid, None)
        if cgroup is not None:
            containers.kill_and_remove(cgroup)


def _end_what_left_the_group(process: RankProcess) -> None:
    """A rank that did not end cleanly (killed, ``os._exit``, a crash, an exception, or ended by the
    launcher) may not have ended its descendants itself: SIGKILL those that left its group, found
    by its mark. (A rank that returned ended all of them before it exited.)"""
    if process.exitcode != 0 or process.signalled:
        kill_marked(rank_prefix(os.getpid(), process.process.pid))
