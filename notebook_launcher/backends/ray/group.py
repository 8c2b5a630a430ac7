"""The kernel's side of a cluster launch's ranks: a ``RankGroup`` over Ray actors.

Each rank's actor (``host.RankHost``) keeps what its rank writes; one relay thread per rank
long-polls the actor and writes the bytes into local pipes, which the supervisor reads exactly as a
local rank's (``backends.local.pipes.RankProcess``: the same frame and line readers, the same order).
The rank's log starts with the node it runs on. The exit code arrives last and is written to an
exit pipe, the rank's "sentinel". The controller's commands go to the actors: stacks and
SIGTERM/SIGKILL to the rank's process tree on its node. A rank whose actor dies (its node was
lost) ends with a note naming its node, and the pool is not reused; when the cluster's head is lost
(``head_watch``), every rank ends with that reason within seconds, even one whose actor still answers.

Example (what the starter does for one attempt)::

    group = RayRankGroup(pool, payload, grace_period=2.0)
    group.start([spec])          # one spec per actor (``RayStarter.rank_spec``: its node's environment)
"""

from __future__ import annotations

import os
import struct
import threading
import time
from collections.abc import Collection, Sequence
from multiprocessing.connection import wait
from typing import Any

from ...wire import SIGNAL_SENDER_MARK, STACKS_SIGNAL
from ...wire.spec import RankSpec
from ..base import RankSink
from ..local.piped_group import PipedRankGroup
from ..local.pipes import RankProcess, make_pipes
from .head_watch import ignored_once_lost, lost_reason
from .pool import RankPool

__all__ = ["RayRankGroup"]

_CODE = struct.Struct("<i")
_POLL = 1.0  # seconds one long poll of an actor waits for news
_LOST = -9  # the exit code of a rank whose actor (or node) is gone
_SLACK = 5.0  # seconds past its long poll an actor may take to answer before the head is looked at


class HeadLost(Exception):
    """The cluster's head was lost while the rank ran (``head_watch``): the rank is given up."""


class RelayedExit:
    """A remote rank as the supervisor waits on it: ``sentinel`` becomes readable with its exit code."""

    def __init__(self) -> None:
        self._read: int | None
        self._read, self.write = os.pipe()
        self.sentinel = self._read
        self.pid = 0
        self._code: int | None = None
        self.lost: str | None = None  # set by the relay before the code, when the actor was lost

    def wait(self, timeout: float | None = None) -> int | None:
        if self._code is None and self._read is not None:
            if not wait([self._read], timeout):
                return None
            data = os.read(self._read, _CODE.size)
            self._code = _CODE.unpack(data)[0] if len(data) == _CODE.size else _LOST
        return self._code

    def release(self) -> None:
        if self._read is not None:
            os.close(self._read)
            self._read = None


class _Relay(threading.Thread):
    """Moves one actor's outbox into the kernel's pipes of its rank, until the rank has exited."""

    def __init__(self, rank: int, actor: Any, started: Any, pipes: Any, exit_: RelayedExit, where: str) -> None:
        super().__init__(name=f"notebook-launcher-ray-relay-{rank}", daemon=True)
        self.rank = rank
        self.actor = actor
        self.started = started
        self.fds = {"events": pipes.events, "stdout": pipes.stdout, "stderr": pipes.stderr}
        self.exit = exit_
        self.where = where
        self.lost = False

    def run(self) -> None:
        import ray

        code = _LOST
        try:
            self.exit.pid = ray.get(self.started)
            self._write(
                "stdout", f"{SIGNAL_SENDER_MARK}rank {self.rank} runs on {self.where}, pid {self.exit.pid}\n".encode()
            )
            code = self._relay(ray)
        except HeadLost as lost:
            self._head_lost(str(lost))
        except Exception as err:  # the actor or its node is gone, the rank could not start, or the head is lost
            if (reason := lost_reason(check_now=True)) is not None:
                self._head_lost(reason)
                return
            self.lost = isinstance(err, ray.exceptions.RayActorError)
            what = "its Ray actor died" if self.lost else "it could not start"
            if self.lost:
                self.exit.lost = f"its Ray actor on {self.where} died (its node may be gone): {type(err).__name__}"
            note = f"\n{SIGNAL_SENDER_MARK}rank {self.rank} on {self.where}: {what}: {type(err).__name__}: {err}\n"
            self._write("stderr", note.encode())
            code = _LOST if self.lost else 1
        finally:
            for fd in self.fds.values():
                os.close(fd)
            try:
                os.write(self.exit.write, _CODE.pack(code))
            finally:
                os.close(self.exit.write)

    def _head_lost(self, reason: str) -> None:
        self.lost = True
        self.exit.lost = reason
        self._write("stderr", f"\n{SIGNAL_SENDER_MARK}rank {self.rank} on {self.where}: {reason}\n".encode())

    def _relay(self, ray: Any) -> int:
        while True:
            answer = self.actor.poll.remote(_POLL)
            while not ray.wait([answer], timeout=_POLL + _SLACK)[0]:
                if (reason := lost_reason()) is not None:  # a poll of a lost cluster may never answer
                    raise HeadLost(reason)
            for kind, data in ray.get(answer):
                if kind == "exit":
                    return int(data)
                self._write(kind, data)
            if (reason := lost_reason()) is not None:
                raise HeadLost(reason)

    def _write(self, kind: str, data: bytes) -> None:
        fd = self.fds[kind]
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(fd, view) :]
            except BrokenPipeError:  # the kernel closed its end: the launch is over
                return


class RayRankGroup(PipedRankGroup):
    """The ranks of one attempt on the pool's actors (a ``RankGroup``)."""

    def __init__(self, pool: RankPool, payload: Any, grace_period: float) -> None:
        super().__init__()
        self._pool = pool
        self._payload = payload
        self._grace = grace_period
        self._relays: list[_Relay] = []

    @property
    def ended_cleanly(self) -> bool:
        """Every rank returned (exit code 0) without being signalled and every actor lived: the
        pool may carry the next launch."""
        return (
            bool(self._processes)
            and not any(relay.lost for relay in self._relays)
            and all(process.exitcode == 0 and not process.signalled for process in self._processes)
        )

    def start(self, specs: list[RankSpec]) -> None:
        (spec,) = specs
        layout = self._pool.layout
        actor = self._pool.actors[spec.rank]
        ours, theirs = make_pipes()
        exit_ = RelayedExit()
        spot = layout.spot(spec.rank)
        started = actor.start_rank.remote(spec, self._payload)
        relay = _Relay(spec.rank, actor, started, theirs, exit_, f"node {layout.node_rank(spec.rank)} ({spot.address})")
        relay.start()
        self._relays.append(relay)
        self._processes.append(RankProcess([spec.rank], exit_, ours))  # type: ignore[arg-type]

    def ask_stacks(self, ranks: Sequence[int]) -> None:
        self._tell([process for process in self._live() if process.first_rank in ranks], "signal", STACKS_SIGNAL)

    def terminate(self, spare: Collection[int] = ()) -> None:
        self._tell(self._signal_live(spare), "terminate")

    def kill(self) -> None:
        self._tell(self._signal_live(), "kill")

    def wait_exits(self, deadline: float | None) -> None:
        for process in self._live():
            remaining = max(0.0, (deadline or time.monotonic()) - time.monotonic())
            code = process.process.wait(remaining)
            if code is None:
                self.kill()
                code = process.process.wait(self._grace + 10.0)
            if code is None:  # the actor does not answer: end it (its node may be gone)
                self._kill_actor(process.first_rank)
                code = process.process.wait()
            process.exitcode = code

    def close(self, sink: RankSink) -> None:
        for relay in self._relays:
            relay.join(self._grace + 10.0)
            if relay.is_alive():  # the actor stopped answering: ending it ends the relay's poll
                self._kill_actor(relay.rank)
                relay.join()
        for process in self._processes:
            process.drain_and_close(sink)
            process.process.release()

    def _tell(self, processes: list[RankProcess], method: str, *args: Any) -> None:
        for process in processes:
            with ignored_once_lost():  # the kernel has left a cluster whose head was lost: its relay ends the rank
                getattr(self._pool.actors[process.first_rank], method).remote(*args)

    def _kill_actor(self, rank: int) -> None:
        import ray

        for relay in self._relays:
            if relay.rank == rank:
                relay.lost = True
        if lost_reason() is not None:
            return  # killing an actor asks the head, which is gone
        try:
            ray.kill(self._pool.actors[rank], no_restart=True)
        except Exception:
            pass
