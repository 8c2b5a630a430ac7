"""What runs on a cluster node: ``RankHost``, the body of one Ray actor that carries one rank.

The actor is warm: it starts the node's own start server (``rank.start_server``: torch imported
once, single-threaded, safe to fork) when it is created, and every launch forks its rank from it in
milliseconds, exactly as a local spawn-path launch does. So a rank on a cluster is, on its node, an
ordinary rank process: its own process group, its pipes (events, stdout, stderr), its exit code.
The actor reads those pipes and keeps what they carry, raw, in an outbox the kernel empties with
``poll`` (a long poll: one call returns as soon as anything is there); the kernel decodes it with the
same readers as for a local rank. Ray's own log forwarding is not used (it merges and repeats
lines), and nothing is streamed with Ray generators (they do not work over Ray Client).

The actor also hosts the ranks' store when it carries rank 0 (as the kernel does for local ranks),
and carries the kernel's signals to its rank: stacks, SIGTERM, SIGKILL. A rank that fails leaves the
actor as it was, ready for the next launch.

Examples (in a Ray driver; ``ray.remote(RankHost)`` is what ``pool`` creates)::

    host = ray.remote(RankHost).remote()
    spot = ray.get(host.ready.remote())              # {"address": ..., "node_id": ..., ...}
    pid = ray.get(host.start_rank.remote(spec, payload))
    ray.get(host.poll.remote(1.0))                   # [("stdout", b"hello\\n"), ..., ("exit", 0)]
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import wait
from typing import Any

__all__ = ["RankHost"]

_CHUNK = 1 << 16


class RankHost:
    """One rank's carrier on a cluster node (a Ray actor; see the module docstring)."""

    def __init__(self) -> None:
        # The start server dies with the thread that started it (PR_SET_PDEATHSIG), so it is
        # started, and asked for ranks, from one thread that lives as long as the actor.
        self._starter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="notebook-launcher-starter")
        self._warm = self._starter.submit(self._server)
        self._lock = threading.Condition()
        self._outbox: list[tuple[str, Any]] = []
        self._rank: Any = None  # the live rank's ``RankHost._Rank``
        self._store: Any = None

    # -- set-up ----------------------------------------------------------------------------------

    def ready(self) -> dict:
        """Wait until the start server is warm; where this actor runs (``placement.Spot``'s fields) and
        the notebook-launcher it runs ("version")."""
        self._warm.result()
        import ray

        from ..._version import __version__

        context = ray.get_runtime_context()
        return {
            "version": __version__,
            "address": ray.util.get_node_ip_address(),
            "node_id": context.get_node_id(),
            "gpus": tuple(str(gpu) for gpu in ray.get_gpu_ids()),
            "pid": os.getpid(),
        }

    def host_store(self, workers: int, timeout: float) -> int:
        """Host the ranks' store on this node's address (rank 0's actor); its port."""
        import ray

        from ..local.rendezvous import host_store

        self._store = host_store(ray.util.get_node_ip_address(), None, workers, timeout)
        return self._store.port

    def close_store(self, port: int) -> None:
        """Stop hosting the store on ``port`` (a later launch's store stays)."""
        if self._store is not None and self._store.port == port:
            self._store = None

    @staticmethod
    def _server() -> Any:
        from ..local.server import _registry

        server = _registry.server()
        server.wait_ready()
        return server

    # -- one rank ---------------------------------------------------------------------------------

    def start_rank(self, spec: Any, payload: bytes) -> int:
        """Fork the rank ``spec`` describes from the start server; its pid. ``payload`` is the
        launch's function and arguments, as the spawn starter writes them."""
        from ...scratch import anonymous_file

        if self._rank is not None and self._rank.exitcode is None:
            raise RuntimeError(f"this actor still carries rank {self._rank.spec.rank} (pid {self._rank.pid})")
        file = anonymous_file(payload)
        spec = dataclasses.replace(spec, launcher_pid=os.getpid(), tensor_prefix=None)
        with self._lock:
            self._outbox.clear()
        try:
            rank = self._starter.submit(self._fork, spec, file).result()
        except BaseException:
            file.close()
            raise
        self._rank = rank
        threading.Thread(target=self._relay, args=(rank,), name="notebook-launcher-relay", daemon=True).start()
        return rank.pid

    def _fork(self, spec: Any, payload: Any) -> _Rank:
        from ..local.pipes import close_pipes, make_pipes

        ours, theirs = make_pipes()
        try:
            process = self._server().start_rank(spec, payload.fileno(), theirs)
        except BaseException:
            close_pipes(ours)
            raise
        finally:
            close_pipes(theirs)
        return _Rank(spec, process, ours, payload)

    def poll(self, timeout: float) -> list[tuple[str, Any]]:
        """What the rank sent since the last poll, waiting up to ``timeout`` s for something:
        ``(pipe, bytes)`` items in order, and ``("exit", code)`` last once the rank has ended."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while not self._outbox and (remaining := deadline - time.monotonic()) > 0:
                self._lock.wait(remaining)
            items, self._outbox = self._outbox, []
        return items

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the rank (stacks)."""
        rank = self._rank
        if rank is not None and rank.exitcode is None:
            try:
                os.kill(rank.pid, signum)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        """SIGTERM the rank's process tree (the kernel sends ``kill`` after its grace period)."""
        rank = self._rank
        if rank is not None and rank.exitcode is None:
            rank.reaper.terminate([rank.pid])

    def kill(self) -> None:
        """SIGKILL the rank's process tree now."""
        rank = self._rank
        if rank is not None and rank.exitcode is None:
            rank.reaper.kill([rank.pid])

    def _relay(self, rank: _Rank) -> None:
        """Move what the rank writes into the outbox until it exits, then add its exit code."""
        from ..local.reaper import end_group

        while True:
            ready = wait([*rank.pipes.values(), rank.process.sentinel])
            if rank.process.sentinel in ready:
                break
            for kind, fd in list(rank.pipes.items()):
                if fd in ready:
                    self._read(rank, kind, drain=False)
        end_group(rank.pid)  # what the rank started, before its pid can be reused
        code = rank.process.wait()
        for kind in list(rank.pipes):
            self._read(rank, kind, drain=True)
        rank.close()
        rank.exitcode = code
        self._send(("exit", code))

    def _read(self, rank: _Rank, kind: str, drain: bool) -> None:
        fd = rank.pipes[kind]
        total = 0
        while drain or total < (1 << 20):
            try:
                chunk = os.read(fd, _CHUNK)
            except BlockingIOError:
                return
            if not chunk:
                os.close(rank.pipes.pop(kind))
                return
            total += len(chunk)
            self._send((kind, chunk))

    def _send(self, item: tuple[str, Any]) -> None:
        with self._lock:
            self._outbox.append(item)
            self._lock.notify_all()


class _Rank:
    """The live rank of an actor: its process, the actor's ends of its pipes, its payload file."""

    def __init__(self, spec: Any, process: Any, pipes: Any, payload: Any) -> None:
        from ..local.reaper import Reaper

        self.spec = spec
        self.process = process
        self.pid = process.pid
        self.pipes = {"events": pipes.events, "stdout": pipes.stdout, "stderr": pipes.stderr}
        self.payload = payload
        self.reaper = Reaper(grace_period=0.0)
        self.exitcode: int | None = None

    def close(self) -> None:
        for fd in self.pipes.values():
            os.close(fd)
        self.pipes = {}
        self.process.release()
        self.payload.close()
