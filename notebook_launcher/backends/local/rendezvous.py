"""Where the ranks of one attempt meet: the TCPStore their process group uses, and the nodes' join.

The store is hosted by the kernel of node 0, as torchrun's agent hosts it, not by rank 0: the
kernel binds a socket to ``master_addr`` only (never every interface) and hands it to
``torch.distributed.TCPStore`` (``master_listen_fd``); the ranks get
``TORCHELASTIC_USE_AGENT_STORE=True`` and connect to it as clients, so ``init_process_group()``
works unchanged. Binding first also removes the race between picking a free port and using it.

With several nodes, what must be reachable from every node is ``master_addr:port`` (the store) and
whatever ports the ranks' backend opens between machines (gloo/NCCL pick them; see their
``*_SOCKET_IFNAME`` settings). A TCPStore has no authentication, so every message between the
nodes' kernels is signed with the launch's ``secret`` (``signed_store``): a process that is not
one of the nodes can disturb a launch (it can reach the port) but cannot forge a node's join, its
failure or node 0's address, and nothing read from a store is unpickled. The nodes meet before
any rank starts:

* ``rdzv_backend="static"`` (as torchrun's static rendezvous): node 0 hosts the store at
  ``master_addr:use_port``; every node signs its join and waits until all ``num_nodes`` have,
  polling so that a stop (an interrupt) is seen at once;
* ``rdzv_backend="c10d"`` (as torchrun's dynamic rendezvous, without its pickled state): the nodes
  meet at ``rdzv_endpoint`` (the first node to bind it hosts it) and are numbered in the order
  they arrive; the node numbered 0 then hosts the ranks' store, as above, and signs its address
  on the meeting store.

Every attempt of a launch (``max_restarts``) meets under keys of its own, and a node checks that
the store it reached is the one of its attempt (node 0 signs an attempt marker when it hosts),
so a node that restarts faster than node 0 never joins node 0's previous store.

Launches of one notebook share their secret, run id and attempt numbers, so a signed value
recorded from one launch would verify in the next. Each store's host therefore draws a random
session, signs it as the attempt marker, and signs every later message with it (``signed_store``):
a value from another launch never verifies. A marker can still be replayed, so a joining node
writes a random challenge and goes on only once the store's host has signed it in the session,
bound to the store's port: only a node holding the secret can, only now, and only the host of the
store the node reached. That holds for the c10d meeting store as for the ranks' store: a marker and
address copied from a concurrent launch with the same secret into this one's meeting store no longer
lead a node into the other launch (it trained there, silently); the node's wait times out saying so.

A node that does not come within ``rendezvous_timeout`` is a ``LaunchError`` naming what was
waited for. While the ranks run, every node watches one key of the store: a node whose launch
fails signs it, and the others end their ranks with that node's reason.

Examples:
    >>> meeting = Rendezvous(master_addr="127.0.0.1", port=None, node_rank=0, num_nodes=1)
    >>> port = meeting.open(stop_requested=lambda: False, waiting=print)
    >>> 1024 <= port <= 65535
    True
    >>> meeting.waitables()   # readable once a rank connects: then serve()
    [<socket.socket ...>]
    >>> meeting.serve()
    >>> meeting.close()
"""

from __future__ import annotations

import datetime
import errno
import secrets
import socket
import time
from collections.abc import Callable
from typing import Any

from ...errors import LaunchError
from .challenges import Wait, answer_all, await_answer, forgeries
from .signed_store import SignedStore
from .stores import bind as _bind
from .stores import host_store
from .stores import listening as _listening

__all__ = ["Rendezvous", "host_store"]

_POLL = 0.1  # seconds between looks at the store while waiting
_ATTEMPT = "attempt"  # the marker node 0 (or the meeting's host) signs when it hosts a store
_CANNOT_BIND = (errno.EADDRINUSE, errno.EADDRNOTAVAIL)


class Rendezvous:
    """The meeting of one attempt of a launch; ``open`` it before the ranks start, ``close`` it after."""

    def __init__(
        self,
        master_addr: str,
        port: int | None,
        node_rank: int,
        num_nodes: int,
        timeout: float = 300.0,
        backend: str = "static",
        endpoint: str = "",
        run_id: str = "none",
        secret: bytes = b"",
        attempt: int = 0,
    ) -> None:
        self.master_addr = master_addr
        self.port = port
        self.node_rank = node_rank
        self.num_nodes = num_nodes
        self.timeout = timeout
        self.backend = backend
        self.endpoint = endpoint
        self.run_id = run_id
        self.attempt = attempt
        self._secret = secret
        self.store: Any = None  # the ranks' store (server on node 0, a client elsewhere)
        self._signed: SignedStore | None = None  # node-to-node messages on it
        self._meeting: SignedStore | None = None  # c10d: the store the nodes meet at
        self._meeting_port = 0
        self._hosts_meeting = False  # c10d: this node hosts the meeting store (it answers challenges there)
        self._listener: socket.socket | None = None  # bound, not served yet (one node)

    @classmethod
    def for_plan(cls, plan: Any, attempt: int) -> Rendezvous:
        """The meeting of ``attempt`` of a launch on this kernel's machine (``LaunchPlan``)."""
        meeting = plan.rendezvous
        return cls(
            plan.master_addr,
            meeting.port,
            plan.node_rank,
            plan.num_nodes,
            meeting.timeout,
            meeting.backend,
            meeting.endpoint,
            plan.run_id,
            meeting.secret,
            attempt,
        )

    # -- opening --------------------------------------------------------------------------------

    def open(self, stop_requested: Callable[[], bool], waiting: Callable[[str], None]) -> int:
        """Host or join the store and wait for every node; returns the ranks' store port.

        Raises:
            LaunchError: a node did not come within the timeout, or the port cannot be used.
        """
        deadline = time.monotonic() + self.timeout
        c10d = self.backend == "c10d" and self.num_nodes > 1
        if c10d:
            self._number_nodes(deadline, stop_requested, waiting)
        if self.node_rank == 0 and self.num_nodes == 1:
            # one node: bound now (the port is the ranks'), served once they are started (``serve``)
            self._listener = _bind(self.master_addr, self.port)
            self.port = self._listener.getsockname()[1]
            return self.port
        if self.node_rank == 0:
            self.store = self._host(self.master_addr, None if c10d else self.port, self.num_nodes)
            self.port = self.store.port
            self._signed = self._sign(self.store)
            if self.num_nodes > 1:
                self._signed = self._hosted(self._signed)
            if self._meeting is not None:
                self._meeting.set("master", f"{self.master_addr}:{self.port}")
        else:
            if self._meeting is not None:
                self._read_master(deadline, stop_requested, waiting)
            self.store, self._signed = self._connect(
                self.master_addr, int(self.port or 0), deadline, stop_requested, waiting
            )
            self._challenge_node_0(deadline, stop_requested, waiting)
        if self.num_nodes > 1:
            self._wait_for_nodes(deadline, stop_requested, waiting)
        assert self.port is not None
        return self.port

    def waitables(self) -> list:
        """What the supervisor waits on for this meeting: with one node, the store's bound socket
        until it is served (it becomes readable when the first rank connects: then call ``serve``);
        else nothing.

        A launch whose ranks never connect (most quick ones) never starts a store; one whose ranks
        do pays the start-up while the later ranks are still being started.
        """
        return [self._listener] if self._listener is not None else []

    def serve(self) -> None:
        """Start serving the bound store (one node; a no-op once served). Ranks that connected
        before are held in the socket's backlog."""
        listener, self._listener = self._listener, None
        if listener is not None:
            self.store = self._host(self.master_addr, None, self.num_nodes, listener)

    def _sign(self, store: Any) -> SignedStore:
        return SignedStore(store, self._secret, self.run_id, self.attempt)

    @staticmethod
    def _hosted(signed: SignedStore) -> SignedStore:
        """Draw this store's session and sign it as the attempt marker; the store in that session."""
        session = secrets.token_hex(16)
        signed.set(_ATTEMPT, session)
        return signed.in_session(session)

    def _host(self, address: str, port: int | None, workers: int, listener: socket.socket | None = None) -> Any:
        return host_store(address, port, workers, self.timeout, listener)

    def _connect(
        self,
        address: str,
        port: int,
        deadline: float,
        stop_requested: Callable[[], bool],
        waiting: Callable[[str], None],
        whose: str = "node 0's store",
    ) -> tuple[Any, SignedStore]:
        """A client of the store at ``address:port`` once it is this attempt's (its host signed the
        attempt marker), and the store in its host's session; an earlier attempt's store, or none
        yet, is waited out."""
        import torch.distributed as dist

        target = f"{address}:{port}"
        forged = 0
        while True:
            if stop_requested():
                raise LaunchError(f"stopped while waiting for {whose} at {target}")
            try:
                if not _listening(address, port):
                    raise ConnectionRefusedError(target)
                store = dist.TCPStore(address, port, self.num_nodes, False, timeout=datetime.timedelta(seconds=1))
                signed = self._sign(store)
                session = signed.get(_ATTEMPT)
                if session is not None:
                    store.set_timeout(datetime.timedelta(seconds=self.timeout))
                    return store, signed.in_session(session)
                forged += signed.forged
                del store  # an earlier attempt's store, or one not signed with this launch's secret
            except Exception:  # not up yet: node 0 may start later
                pass
            self._tend()
            if time.monotonic() > deadline:
                mismatch = (
                    "; the store there was not signed with this node's secret: give every node the same secret="
                    if forged
                    else f": is node 0 launching, and is {target} reachable from this machine?"
                )
                raise LaunchError(
                    f"node {self.node_rank} could not reach {whose} (attempt {self.attempt}) at {target}"
                    f" within rendezvous_timeout={self.timeout:g} s{mismatch}"
                )
            waiting(f"waiting for {whose} at {target}")
            time.sleep(_POLL)  # a poll for a store on another machine, bounded by the deadline

    def _challenge_node_0(
        self, deadline: float, stop_requested: Callable[[], bool], waiting: Callable[[str], None]
    ) -> None:
        """Go on only once node 0 has signed this node's fresh challenge in the store's session: a
        marker replayed from another launch has no node 0 behind it to do so."""
        assert self._signed is not None
        wait = Wait(deadline, self.timeout, stop_requested, waiting)
        who = f"node {self.node_rank}"
        await_answer(self._signed, str(self.node_rank), int(self.port or 0), who, "node 0", wait, self._tend)

    def _challenge_meeting_host(
        self, deadline: float, stop_requested: Callable[[], bool], waiting: Callable[[str], None]
    ) -> None:
        """c10d: go on only once the meeting store's host has signed this node's challenge in the
        session its marker names (a marker copied from a concurrent launch names that launch's)."""
        meeting = self._meeting
        assert meeting is not None
        wait = Wait(deadline, self.timeout, stop_requested, waiting)
        number = str(meeting.count("challengers"))
        host = "the c10d rendezvous host"
        await_answer(meeting, number, self._meeting_port, "a joining node", host, wait, self._tend)

    def _tend(self) -> None:
        """Answer, in each store this node hosts, the challenges not answered yet: the ranks' store
        (node 0) and the c10d meeting store (its host), whatever this node is waiting for itself."""
        if self._hosts_meeting and self._meeting is not None:
            challengers = self._meeting.count("challengers", 0)
            answer_all(self._meeting, (str(name) for name in range(1, challengers + 1)), self._meeting_port)
        if self.node_rank == 0 and self._signed is not None and self.num_nodes > 1 and self.port is not None:
            answer_all(self._signed, (str(node) for node in range(1, self.num_nodes)), self.port)

    def _wait_for_nodes(
        self, deadline: float, stop_requested: Callable[[], bool], waiting: Callable[[str], None]
    ) -> None:
        signed = self._signed
        assert signed is not None
        signed.set(f"joined/{self.node_rank}", "joined")
        while True:
            self._tend()
            joined = sum(signed.get(f"joined/{node}") is not None for node in range(self.num_nodes))
            if joined >= self.num_nodes:
                return
            if stop_requested():
                raise LaunchError(f"stopped while waiting for nodes: {joined} of {self.num_nodes} had joined")
            if time.monotonic() > deadline:
                raise LaunchError(
                    f"only {joined} of {self.num_nodes} nodes joined the rendezvous at"
                    f" {self.master_addr}:{self.port} within rendezvous_timeout={self.timeout:g} s" + forgeries(signed)
                )
            waiting(
                f"waiting for {self.num_nodes - joined} more node(s) to join at {self.master_addr}:{self.port}"
                f" ({joined} of {self.num_nodes} here)"
            )
            time.sleep(_POLL)  # a poll of the store while waiting for other machines, bounded by the deadline

    # -- c10d: the nodes are numbered in the order they arrive -------------------------------------

    def _number_nodes(
        self, deadline: float, stop_requested: Callable[[], bool], waiting: Callable[[str], None]
    ) -> None:
        host, _, port = (self.endpoint or f"{self.master_addr}:{self.port}").rpartition(":")
        host = host.strip("[]")
        waiting(f"joining the c10d rendezvous at {host}:{port} (run id {self.run_id!r})")
        self._meeting_port = int(port)
        try:
            store = self._host(host, int(port), self.num_nodes)
            self._meeting = self._hosted(self._sign(store))
            self._hosts_meeting = True
        except LaunchError as err:
            if not isinstance(err.__cause__, OSError) or err.__cause__.errno not in _CANNOT_BIND:
                raise
            _, self._meeting = self._connect(
                host, int(port), deadline, stop_requested, waiting, "the c10d rendezvous store"
            )
            self._challenge_meeting_host(deadline, stop_requested, waiting)
        arrival = self._meeting.count("arrivals")
        if arrival > self.num_nodes:
            raise LaunchError(
                f"more than num_nodes={self.num_nodes} nodes joined the c10d rendezvous at {host}:{port}"
                f" (run id {self.run_id!r}); this node arrived as number {arrival}"
            )
        self.node_rank = arrival - 1
        self.port = None  # the ranks' store gets a port of its own

    def _read_master(self, deadline: float, stop_requested: Callable[[], bool], waiting: Callable[[str], None]) -> None:
        meeting = self._meeting
        assert meeting is not None
        while (address := meeting.get("master")) is None:
            self._tend()
            if stop_requested():
                raise LaunchError("stopped while waiting for node 0's address")
            if time.monotonic() > deadline:
                raise LaunchError(
                    f"node 0 did not publish its store's address on the c10d rendezvous within"
                    f" rendezvous_timeout={self.timeout:g} s" + forgeries(meeting)
                )
            waiting("waiting for node 0's store address")
            time.sleep(_POLL)  # a poll of the meeting store, bounded by the deadline
        self.master_addr, port = address.rsplit(":", 1)
        self.port = int(port)

    # -- while the ranks run ------------------------------------------------------------------------

    def report_failure(self, reason: str) -> None:
        """Tell the other nodes that this node's launch failed (they end their ranks)."""
        if self._signed is not None and self.num_nodes > 1:
            try:
                self._signed.set("failed", f"node {self.node_rank}: {reason}")
            except Exception:  # the store may be gone with node 0: the ranks' own errors still tell
                pass

    def failure_elsewhere(self) -> str | None:
        """Another node's failure, if one was reported (and signed by a node of this launch)."""
        if self._signed is None or self.num_nodes == 1:
            return None
        try:
            reason = self._signed.get("failed")
        except Exception:  # node 0's store is gone: its ranks are ending, ours will see it in the collective
            return "node 0's rendezvous store is gone"
        if reason is None or reason.startswith(f"node {self.node_rank}:"):
            return None
        return reason

    def leave(self, stop_requested: Callable[[], bool], waiting: Callable[[str], None]) -> None:
        """Tell the other nodes that this node's ranks have all returned.

        Node 0 hosts the ranks' store, so it keeps it up until every node has left, one has failed,
        a stop is requested or ``rendezvous_timeout`` has passed (torchrun's agents wait at an exit
        barrier for the same reason): a node whose ranks are still sending their results would
        otherwise take the vanished store for node 0's failure.
        """
        signed = self._signed
        if signed is None or self.num_nodes == 1:
            return
        try:
            signed.set(f"left/{self.node_rank}", "left")
            deadline = time.monotonic() + self.timeout
            while self.node_rank == 0:
                left = sum(signed.get(f"left/{node}") is not None for node in range(self.num_nodes))
                if left >= self.num_nodes or stop_requested() or time.monotonic() > deadline:
                    return
                if signed.get("failed") is not None:
                    return
                waiting(f"this node's ranks are done; keeping the store up for {self.num_nodes - left} more node(s)")
                time.sleep(_POLL)  # a poll of the store, bounded by the deadline
        except Exception:  # another node's store is gone: nothing left to tell it
            pass

    def places(self) -> dict:
        """{}: this kernel's ranks run on its own machine (other nodes' kernels drive theirs)."""
        return {}

    def close(self) -> None:
        """Stop hosting (or leave) the stores; their ports are free again afterwards."""
        self.store = None
        self._signed = None
        self._meeting = None
        if self._listener is not None:  # never served: the launch ended before its ranks started
            self._listener.close()
            self._listener = None
