"""The ``Starter`` of a launch on a Ray cluster, and the ``Meeting`` its ranks hold there.

The kernel connects to the cluster and pickles the function and its arguments by value (as spawn
does: cell-defined functions and classes travel) before anything starts; each attempt then takes
the warm actors (``pool``), has rank 0's actor host the ranks' store on rank 0's node (as Ray
Train does: the kernel may be a laptop the nodes cannot reach) and starts one rank per actor.

Examples (what ``RayBackend.starter(plan)`` gives the launch)::

    starter = RayStarter(); starter.prepare(plan)
    meeting = starter.meeting(plan, attempt=0); port = meeting.open(lambda: False, print)
    group = starter.rank_group(plan)
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ...wire.spec import RankSeat, RankSpec
from ..base import Meeting, Place, Starter
from ..payload import payload_file_bytes
from .connect import connect
from .group import RayRankGroup
from .head_watch import ignored_once_lost, loss_named
from .pool import RankPool, acquire, done_with

__all__ = ["RayStarter", "RayMeeting"]


class RayStarter(Starter):
    name = "ray"

    def __init__(self) -> None:
        self.pool: RankPool | None = None
        self._payload: Any = None
        self._group: RayRankGroup | None = None

    def prepare(self, plan: Any) -> None:
        """Connect to the cluster and pickle the payload; raises ``LaunchError`` before anything starts."""
        ray = connect(plan.options.address)
        payload = payload_file_bytes(plan.function, plan.args, "a launch on a Ray cluster", "plain values")
        with loss_named():
            self._payload = ray.put(payload)

    def meeting(self, plan: Any, attempt: int) -> RayMeeting:
        return RayMeeting(self, plan)

    def rank_spec(self, plan: Any, seat: RankSeat) -> RankSpec:
        """The rank's environment on its node (``LOCAL_RANK``, the node's rank, its CPUs as threads);
        no /dev/shm prefix: its node does not share this machine's."""
        assert self.pool is not None, "the meeting is opened before the specs are made"
        threads = plan.options.cpus
        env = self.pool.layout.environment(seat.rank, seat.env, threads=threads)
        return RankSpec(
            seat.rank,
            int(env["LOCAL_RANK"]),
            env,
            os.getpid(),
            threads,
            None,
            launcher_pid=os.getpid(),
            flush_interval=plan.flush_interval,
        )

    def rank_group(self, plan: Any) -> RayRankGroup:
        assert self.pool is not None, "the meeting is opened before the ranks start"
        self._group = RayRankGroup(self.pool, self._payload, plan.grace_period)
        return self._group

    def cleanup(self) -> None:
        """Keep the actors warm after a clean attempt; release them after any other."""
        pool, self.pool = self.pool, None
        if pool is not None:
            done_with(pool, healthy=self._group is not None and self._group.ended_cleanly)
        self._payload = None


class RayMeeting(Meeting):
    """Where a cluster launch's ranks meet: the store rank 0's actor hosts (a ``Meeting``; one
    kernel drives every rank, so there is no other node's launch to hear from)."""

    def __init__(self, starter: RayStarter, plan: Any) -> None:
        self._starter = starter
        self._plan = plan
        self.master_addr = ""
        self._port = 0

    def open(self, stop_requested: Callable[[], bool], waiting: Callable[[str], None]) -> int:
        """Take the warm actors (or wait for new ones) and host the store; the store's port."""
        import ray

        plan = self._plan
        with loss_named():
            pool = acquire(plan.options, plan.num_processes, plan.rendezvous.timeout, stop_requested, waiting)
            self._starter.pool = pool
            self.master_addr = pool.layout.master_addr
            self._port = ray.get(pool.actors[0].host_store.remote(plan.world_size, plan.rendezvous.timeout))
        return self._port

    def places(self) -> dict[int, Place]:
        """Each rank's node (in node-rank order) and its address."""
        pool = self._starter.pool
        return pool.layout.places() if pool is not None else {}

    def close(self) -> None:
        pool = self._starter.pool
        if pool is not None and self._port:
            with ignored_once_lost():
                pool.actors[0].close_store.remote(self._port)
