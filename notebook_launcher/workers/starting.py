"""Persistent workers: ranks started once that run call after call, keeping their state between cells.

``start_workers`` launches ``serve`` on every rank through the ordinary launcher (start methods,
capture, notebook safety, stacks, the sidebar's Stop and cleanup are the launch's), then accepts one
connection per rank on a Unix socket in a private directory: calls go to the ranks over it, replies
come back on the ranks' event channels after their output (``serve``).

Examples:
    >>> workers = start_workers(num_processes=2, display="none")
    >>> workers.exec("import os\\nrank = int(os.environ['RANK'])")
    [None, None]
    >>> workers.run(lambda x: x * 10, 4)
    [40, 40]
    >>> workers.push(step=3)
    >>> workers.exec("rank + step")
    [3, 4]
    >>> workers.pull("rank", ranks=[1])
    [1]
    >>> workers.stop()
    >>> workers.status
    'stopped'
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import time
from multiprocessing.connection import Connection
from typing import Any

from ..choices import DISPLAYS, check_choice
from ..errors import LaunchError
from ..scratch import scratch_dir
from .handle import Workers
from .hello import TOKEN_SIZE
from .lobby import Lobby
from .router import CallRouter
from .serve import serve

__all__ = ["why_none_run", "start_workers", "current_workers"]

CONNECT_TIMEOUT = 120.0  # seconds for every rank to start and connect back (spawn, slow imports)

_current: list[Workers] = []


def current_workers() -> Workers | None:
    """The workers started last in this kernel, if they are still running (what ``%%dist`` uses)."""
    return _current[0] if _current and _current[0].status not in ("stopped", "failed") else None


def why_none_run() -> str:
    """Why no workers are running, for the messages that say so: never started, stopped, or how the
    last ones failed (a rank died: its reason)."""
    if not _current:
        return "no workers are running"
    last = _current[0]
    if last.status != "failed":
        return f"no workers are running (workers {last.launch.id} were stopped)"
    failure = last.launch.exception
    reason = f"{type(failure).__name__}: {failure}" if failure is not None else "a rank ended"
    return f"no workers are running: workers {last.launch.id} failed ({reason})"


def start_workers(
    num_processes: int | None = None, backend: str | None = "auto", display: str = "auto", **launch_options: Any
) -> Workers:
    """Start ``num_processes`` long-lived ranks and return their ``Workers`` handle.

    Args:
        num_processes: as for ``launch`` (None: the kernel's choice).
        backend: the default process group every rank initialises before this returns: "auto" (the
            device's: gloo on CPUs, NCCL on GPUs; none on TPUs, where torch_xla sets up its own),
            "gloo", "nccl", or None / "none" to leave it to you (``dist.init_process_group()`` in a
            cell works, the torchrun environment is set).
        display: how each call shows what the ranks print, in the calling cell, as a launch does:
            "auto" (the live widget and the static form the notebook keeps, one tab per rank, in a
            Jupyter kernel; text elsewhere), "widget", "text" (``[rank N]`` lines) or "none" (kept in
            ``workers.launch.logs(rank)`` only).
        launch_options: ``launch``'s other arguments (``start_method``, ``device``,
            ``mixed_precision``, ``grace_period``, ...); ``max_restarts`` is not offered: a restart
            would lose the ranks' state.

    Raises:
        LaunchError: a rank did not start or connect back; as ``launch`` for bad arguments.
    """
    from ..api import plan_launch, start_launch

    check_choice("display", display, DISPLAYS)
    for name in ("max_restarts", "function", "args"):
        if name in launch_options:
            raise TypeError(f"start_workers() does not take {name!r}")
    directory = scratch_dir()  # mode 0700: only this user
    address = os.path.join(directory, "socket")
    token = secrets.token_bytes(TOKEN_SIZE)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(address)
        server.listen(64)
        plan, notices = plan_launch(serve, (address, token), num_processes, **launch_options)
        router = CallRouter()
        launch = start_launch(plan, notices, router, kind="workers")
        try:
            connections, pids = _accept(server, token, launch, plan.num_processes)
        except BaseException:
            launch.stop()
            raise
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    finally:
        server.close()
    workers = Workers(launch, router, connections, pids, directory, display)
    _current[:] = [workers]
    backend = _resolve_backend(backend, plan.device)
    if backend is not None:
        from ..wire import by_value

        try:  # set-up, not a cell's call: nothing to show for it
            workers._call("run", by_value.dumps((_init_process_group, (backend,))), None, display="none")
        except BaseException:
            workers.stop()
            raise
    return workers


def _resolve_backend(backend: str | None, device: Any) -> str | None:
    """The process-group backend ``start_workers`` initialises, or None for none."""
    if backend in (None, "none"):
        return None
    if backend == "auto":
        return device.backend if device.backend in ("gloo", "nccl") else None
    if not isinstance(backend, str):
        raise TypeError(f"backend must be a str or None, got {type(backend).__name__}")
    return backend


def _init_process_group(backend: str) -> None:
    import torch.distributed as dist

    dist.init_process_group(backend)


def _accept(
    server: socket.socket, token: bytes, launch: Any, count: int
) -> tuple[dict[int, Connection], dict[int, int]]:
    """One connection per rank, each proving with ``token`` that it is one of this launch's ranks
    (``Lobby``: a connection that stays silent holds up no other)."""
    connections: dict[int, Connection] = {}
    pids: dict[int, int] = {}
    deadline = time.monotonic() + CONNECT_TIMEOUT
    with Lobby(server, token) as lobby:
        try:
            while len(connections) < count:
                if launch.done:
                    launch.wait()  # raises the rank's failure
                    raise LaunchError("the workers ended before they connected")
                if time.monotonic() > deadline:
                    raise LaunchError(
                        f"only {len(connections)} of {count} workers connected within {CONNECT_TIMEOUT:g} s"
                    )
                for rank, pid, connection in lobby.arrivals(0.2):  # bounded: a failed launch is seen
                    connections[rank] = connection
                    pids[rank] = pid
        except BaseException:
            for connection in connections.values():
                connection.close()
            raise
    return connections, pids
