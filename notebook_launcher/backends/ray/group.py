"""The kernel's side of a cluster launch's ranks: a ``RankGroup`` over Ray actors (on
``backends.remote``).

Each rank's actor (``host.RankHost``) keeps what its rank writes; one relay thread per rank
long-polls the actor and hands the bytes to the group's inbox, which the supervisor decodes exactly
as a local rank's (``carrier_streams``: the same frame and line readers, in the order the actor read
them). The rank's log starts with the node it runs on. The exit code arrives last. The controller's
commands go to the actors: stacks and SIGTERM/SIGKILL to the rank's process tree on its node. A rank
whose actor dies (its node was lost) ends with a note naming its node, and the pool is not reused;
when the cluster's head is lost (``head_watch``), every rank ends with that reason within seconds,
even one whose actor still answers.

Example (what the starter does for one attempt)::

    group = RayRankGroup(pool, payload, grace_period=2.0)
    group.start([spec])          # one spec per actor (``RayStarter.rank_spec``: its node's environment)
"""

from __future__ import annotations

import threading
from typing import Any

from ...wire import SIGNAL_SENDER_MARK, STACKS_SIGNAL
from ...wire.spec import RankSpec
from ..remote import Carrier, RemoteRankGroup, Signal
from .head_watch import ignored_once_lost, lost_reason
from .pool import RankPool

__all__ = ["RayRankGroup"]

_POLL = 1.0  # seconds one long poll of an actor waits for news
_LOST = -9  # the exit code of a rank whose actor (or node) is gone
_SLACK = 5.0  # seconds past its long poll an actor may take to answer before the head is looked at


class HeadLost(Exception):
    """The cluster's head was lost while the rank ran (``head_watch``): the rank is given up."""


class _Relay(threading.Thread):
    """Moves one actor's outbox into the group's inbox, until the rank has exited."""

    def __init__(self, group: RayRankGroup, carrier: Carrier, actor: Any, started: Any, where: str) -> None:
        super().__init__(name=f"notebook-launcher-ray-relay-{carrier.first_rank}", daemon=True)
        self.group = group
        self.carrier = carrier
        self.rank = carrier.first_rank
        self.actor = actor
        self.started = started
        self.where = where
        self.lost = False

    def run(self) -> None:
        import ray

        code, lost = _LOST, None
        try:
            pid = ray.get(self.started)
            self._write("stdout", f"{SIGNAL_SENDER_MARK}rank {self.rank} runs on {self.where}, pid {pid}\n")
            code = self._relay(ray)
        except HeadLost as err:
            lost = self._head_lost(str(err))
        except Exception as err:  # the actor or its node is gone, the rank could not start, or the head is lost
            if (reason := lost_reason(check_now=True)) is not None:
                lost = self._head_lost(reason)
            else:
                self.lost = isinstance(err, ray.exceptions.RayActorError)
                what = "its Ray actor died" if self.lost else "it could not start"
                if self.lost:
                    lost = f"its Ray actor on {self.where} died (its node may be gone): {type(err).__name__}"
                note = f"{what}: {type(err).__name__}: {err}"
                self._write("stderr", f"\n{SIGNAL_SENDER_MARK}rank {self.rank} on {self.where}: {note}\n")
                code = _LOST if self.lost else 1
        finally:
            self.group.ended(self.carrier, code, lost)

    def _head_lost(self, reason: str) -> str:
        self.lost = True
        self._write("stderr", f"\n{SIGNAL_SENDER_MARK}rank {self.rank} on {self.where}: {reason}\n")
        return reason

    def _relay(self, ray: Any) -> int:
        while True:
            answer = self.actor.poll.remote(_POLL)
            while not ray.wait([answer], timeout=_POLL + _SLACK)[0]:
                if (reason := lost_reason()) is not None:  # a poll of a lost cluster may never answer
                    raise HeadLost(reason)
            for kind, data in ray.get(answer):
                if kind == "exit":
                    return int(data)
                self.group.deliver(self.carrier, kind, data)
            if (reason := lost_reason()) is not None:
                raise HeadLost(reason)

    def _write(self, kind: str, text: str) -> None:
        self.group.deliver(self.carrier, kind, text.encode())


class RayRankGroup(RemoteRankGroup):
    """The ranks of one attempt on the pool's actors (a ``RankGroup``)."""

    def __init__(self, pool: RankPool, payload: Any, grace_period: float) -> None:
        super().__init__(grace_period)
        self._pool = pool
        self._payload = payload
        self._relays: list[_Relay] = []

    @property
    def ended_cleanly(self) -> bool:
        """Every rank returned (exit code 0) without being signalled and every actor lived: the
        pool may carry the next launch."""
        return (
            bool(self._carriers)
            and not any(relay.lost for relay in self._relays)
            and all(carrier.exitcode == 0 and not carrier.signalled for carrier in self._carriers)
        )

    def _start_carrier(self, carrier: Carrier, specs: list[RankSpec]) -> None:
        (spec,) = specs
        layout = self._pool.layout
        actor = self._pool.actors[spec.rank]
        spot = layout.spot(spec.rank)
        started = actor.start_rank.remote(spec, self._payload)
        relay = _Relay(self, carrier, actor, started, f"node {layout.node_rank(spec.rank)} ({spot.address})")
        relay.start()
        self._relays.append(relay)

    def _signal(self, carrier: Carrier, what: Signal) -> None:
        actor = self._pool.actors[carrier.first_rank]
        with ignored_once_lost():  # the kernel has left a cluster whose head was lost: its relay ends the rank
            if what == "stacks":
                actor.signal.remote(STACKS_SIGNAL)
            else:
                getattr(actor, what).remote()

    def _abandon(self, carrier: Carrier) -> None:
        """The actor does not answer: end it (its node may be gone), which ends the relay's poll."""
        self._kill_actor(carrier.first_rank)

    def _join(self) -> None:
        for relay in self._relays:
            relay.join(self._grace + 10.0)
            if relay.is_alive():  # the actor stopped answering: ending it ends the relay's poll
                self._kill_actor(relay.rank)
                relay.join()

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
