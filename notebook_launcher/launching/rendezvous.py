"""Where the ranks of one attempt meet: the TCPStore their process group uses, and the nodes' join.

The store is hosted by the kernel of node 0, as torchrun's agent hosts it, not by rank 0: the
kernel binds a socket to ``master_addr`` only (never every interface) and hands it to
``torch.distributed.TCPStore`` (``master_listen_fd``); the ranks get
``TORCHELASTIC_USE_AGENT_STORE=True`` and connect to it as clients, so ``init_process_group()``
works unchanged. Binding first also removes the race between picking a free port and using it.

With several nodes, what must be reachable from every node is ``master_addr:port`` (the store) and
whatever ports the ranks' backend opens between machines (gloo/NCCL pick them; see their
``*_SOCKET_IFNAME`` settings). The nodes meet before any rank starts:

* ``rdzv_backend="static"`` (as torchrun's static rendezvous): node 0 hosts the store at
  ``master_addr:use_port``; every node adds itself to a counter and waits until all
  ``num_nodes`` have, polling so that a stop (an interrupt) is seen at once;
* ``rdzv_backend="c10d"``: torch's own dynamic rendezvous (``torch.distributed.elastic``) admits
  the nodes and numbers them; the node it numbers 0 then hosts the ranks' store, as above, and
  publishes its address on the rendezvous store.

A node that does not come within ``rendezvous_timeout`` is a ``LaunchError`` naming what was
waited for. While the ranks run, every node watches one key of the store: a node whose launch
fails sets it, and the others end their ranks with that node's reason.

Example:
    >>> meeting = Rendezvous(master_addr="127.0.0.1", port=None, node_rank=0, num_nodes=1)
    >>> port = meeting.open(stop_requested=lambda: False, waiting=print)
    >>> 1024 <= port <= 65535
    True
    >>> meeting.close()
"""

from __future__ import annotations

import datetime
import socket
import time
from collections.abc import Callable
from typing import Any

from ..errors import LaunchError

__all__ = ["Rendezvous"]

_JOINED = "notebook_launcher/joined"
_FAILED = "notebook_launcher/failed"
_MASTER = "notebook_launcher/master"
_LEFT = "notebook_launcher/left"
_POLL = 0.1  # seconds between looks at the store while waiting


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
        conf: dict | None = None,
    ) -> None:
        self.master_addr = master_addr
        self.port = port
        self.node_rank = node_rank
        self.num_nodes = num_nodes
        self.timeout = timeout
        self.backend = backend
        self.endpoint = endpoint
        self.run_id = run_id
        self.conf = dict(conf or {})
        self.store: Any = None  # the ranks' store (server on node 0, a client elsewhere)
        self._handler: Any = None

    # -- opening --------------------------------------------------------------------------------

    def open(self, stop_requested: Callable[[], bool], waiting: Callable[[str], None]) -> int:
        """Host or join the store and wait for every node; returns the ranks' store port.

        Raises:
            LaunchError: a node did not come within the timeout, or the port cannot be used.
        """
        if self.backend == "c10d" and self.num_nodes > 1:
            self._join_c10d(waiting)
        if self.node_rank == 0:
            self._host()
            if self.backend == "c10d" and self.num_nodes > 1:
                self._handler_store().set(_MASTER, f"{self.master_addr}:{self.port}")
        else:
            if self.backend == "c10d":
                self._read_master(stop_requested, waiting)
            self._connect(stop_requested, waiting)
        if self.num_nodes > 1:
            self._wait_for_nodes(stop_requested, waiting)
        assert self.port is not None
        return self.port

    def _host(self) -> None:
        import torch.distributed as dist

        listener = socket.socket(socket.AF_INET6 if ":" in self.master_addr else socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind((self.master_addr, self.port or 0))
            listener.listen(1024)
        except OSError as err:
            listener.close()
            taken = f"port {self.port} is already in use on {self.master_addr}" if self.port else str(err)
            raise LaunchError(
                f"cannot host the rendezvous store: {taken}; pass another use_port, or use_port=None to pick a free one"
            ) from None
        self.port = listener.getsockname()[1]
        # the store takes the socket over (and closes it when it is deleted)
        self.store = dist.TCPStore(
            self.master_addr,
            self.port,
            max(1, self.num_nodes),
            True,
            timeout=datetime.timedelta(seconds=self.timeout),
            wait_for_workers=False,
            master_listen_fd=listener.detach(),
            use_libuv=True,
        )

    def _connect(self, stop_requested: Callable[[], bool], waiting: Callable[[str], None]) -> None:
        import torch.distributed as dist

        deadline = time.monotonic() + self.timeout
        target = f"{self.master_addr}:{self.port}"
        while True:
            if stop_requested():
                raise LaunchError(f"stopped while waiting for node 0's store at {target}")
            try:
                self.store = dist.TCPStore(
                    self.master_addr, int(self.port or 0), self.num_nodes, False, timeout=datetime.timedelta(seconds=1)
                )
                self.store.set_timeout(datetime.timedelta(seconds=self.timeout))
                return
            except Exception:  # not up yet: node 0 may start later
                if time.monotonic() > deadline:
                    raise LaunchError(
                        f"node {self.node_rank} could not reach node 0's rendezvous store at {target}"
                        f" within rendezvous_timeout={self.timeout:g} s: is node 0 launching, and is"
                        f" {target} reachable from this machine?"
                    ) from None
                waiting(f"waiting for node 0's store at {target}")

    def _wait_for_nodes(self, stop_requested: Callable[[], bool], waiting: Callable[[str], None]) -> None:
        self.store.add(_JOINED, 1)
        deadline = time.monotonic() + self.timeout
        while True:
            joined = self.store.add(_JOINED, 0)
            if joined >= self.num_nodes:
                return
            if stop_requested():
                raise LaunchError(f"stopped while waiting for nodes: {joined} of {self.num_nodes} had joined")
            if time.monotonic() > deadline:
                raise LaunchError(
                    f"only {joined} of {self.num_nodes} nodes joined the rendezvous at"
                    f" {self.master_addr}:{self.port} within rendezvous_timeout={self.timeout:g} s"
                )
            waiting(
                f"waiting for {self.num_nodes - joined} more node(s) to join at {self.master_addr}:{self.port}"
                f" ({joined} of {self.num_nodes} here)"
            )
            time.sleep(_POLL)  # a poll of the store while waiting for other machines, bounded by the deadline

    # -- c10d: torch's dynamic rendezvous numbers the nodes ----------------------------------------

    def _join_c10d(self, waiting: Callable[[str], None]) -> None:
        from torch.distributed.elastic.rendezvous import RendezvousParameters
        from torch.distributed.elastic.rendezvous.registry import get_rendezvous_handler

        endpoint = self.endpoint or f"{self.master_addr}:{self.port}"
        waiting(f"joining the c10d rendezvous at {endpoint} (run id {self.run_id!r})")
        conf = {"join_timeout": self.timeout, **self.conf}
        params = RendezvousParameters(
            backend="c10d",
            endpoint=endpoint,
            run_id=self.run_id,
            min_nodes=self.num_nodes,
            max_nodes=self.num_nodes,
            **conf,
        )
        self._handler = get_rendezvous_handler(params)
        try:
            info = self._handler.next_rendezvous()
        except Exception as err:
            raise LaunchError(f"the c10d rendezvous at {endpoint} failed: {type(err).__name__}: {err}") from err
        self.node_rank = info.rank
        self._c10d_store = info.store
        self.port = None  # the ranks' store gets a port of its own

    def _handler_store(self) -> Any:
        return self._c10d_store

    def _read_master(self, stop_requested: Callable[[], bool], waiting: Callable[[str], None]) -> None:
        self._c10d_store.wait([_MASTER], datetime.timedelta(seconds=self.timeout))
        address = self._c10d_store.get(_MASTER).decode()
        self.master_addr, port = address.rsplit(":", 1)
        self.port = int(port)

    # -- while the ranks run ------------------------------------------------------------------------

    def report_failure(self, reason: str) -> None:
        """Tell the other nodes that this node's launch failed (they end their ranks)."""
        if self.store is not None and self.num_nodes > 1:
            try:
                self.store.set(_FAILED, f"node {self.node_rank}: {reason}")
            except Exception:  # the store may be gone with node 0: the ranks' own errors still tell
                pass

    def failure_elsewhere(self) -> str | None:
        """Another node's failure, if one was reported."""
        if self.store is None or self.num_nodes == 1:
            return None
        try:
            if self.store.check([_FAILED]):
                reason = self.store.get(_FAILED).decode()
                return None if reason.startswith(f"node {self.node_rank}:") else reason
        except Exception:  # node 0's store is gone: its ranks are ending, ours will see it in the collective
            return "node 0's rendezvous store is gone"
        return None

    def leave(self, stop_requested: Callable[[], bool], waiting: Callable[[str], None]) -> None:
        """Tell the other nodes that this node's ranks have all returned.

        Node 0 hosts the ranks' store, so it keeps it up until every node has left, one has failed,
        a stop is requested or ``rendezvous_timeout`` has passed (torchrun's agents wait at an exit
        barrier for the same reason): a node whose ranks are still sending their results would
        otherwise take the vanished store for node 0's failure.
        """
        if self.store is None or self.num_nodes == 1:
            return
        try:
            left = self.store.add(_LEFT, 1)
            deadline = time.monotonic() + self.timeout
            while self.node_rank == 0 and left < self.num_nodes:
                if stop_requested() or time.monotonic() > deadline or self.store.check([_FAILED]):
                    return
                waiting(f"this node's ranks are done; keeping the store up for {self.num_nodes - left} more node(s)")
                time.sleep(_POLL)  # a poll of the store, bounded by the deadline
                left = self.store.add(_LEFT, 0)
        except Exception:  # another node's store is gone: nothing left to tell it
            pass

    def close(self) -> None:
        """Stop hosting (or leave) the store; the port is free again afterwards."""
        self.store = None
        if self._handler is not None:
            try:
                self._handler.shutdown()
            except Exception:
                pass
            self._handler = None
