"""Spawn-path ranks forked from a warm, CUDA-free start server (``rank/start_server``).

The first spawn-path launch of a kernel starts the server (one interpreter that imports torch
once); every later one forks its ranks from it in milliseconds instead of starting an interpreter
and importing torch per rank. The function and its arguments travel by value exactly as with
``SpawnStarter`` (the same payload file, its descriptor sent to the server), the rank gets the
kernel's environment and working directory *as they are at launch time*, and a rank started this
way is, to the supervisor, like any other: a pid, a descriptor that becomes readable when it
exits, an exit code.

The server is restarted when a variable read at import time changes in the kernel (``PYTHON*``,
``LD_*``, ``OMP_*``, ``MKL_*``, ``KMP_*``, ``GOMP_*``), and is replaced if it dies.
``NOTEBOOK_LAUNCHER_START_SERVER=off`` makes spawn start fresh interpreters again.
``start_server_info()`` describes it (the sidebar shows it).

Examples:
    >>> start_server_info()["state"] in ("not started", "starting", "warm", "failed", "off")
    True
"""

from __future__ import annotations

import atexit
import os
import pickle
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from typing import Any

from ...compiling import COMPILER_MODULES, compiles
from ...errors import LaunchError
from .base import StartedProcess
from .spawn import SpawnStarter

__all__ = [
    "ServerStarter",
    "StartServer",
    "observe_start_server",
    "server_enabled",
    "shutdown_start_server",
    "start_server_info",
]

READY_TIMEOUT = 300.0  # seconds the server may take to import torch (a cold disk, a slow machine)
PRELOAD_TIMEOUT = 120.0  # more seconds a rank's start may take while the server imports Inductor first
_EXIT_CODE = struct.Struct("<i")
# Read when the interpreter or torch's native libraries load, so a rank forked from a server started
# with other values would not see the change. Variables read later (CUDA_VISIBLE_DEVICES, NCCL_*,
# PYTORCH_CUDA_ALLOC_CONF: when the rank first uses the device) reach the rank with its environment.
_IMPORT_TIME_PREFIXES = ("PYTHON", "LD_", "OMP_", "MKL_", "KMP_", "GOMP_")


def server_enabled() -> bool:
    """Whether spawn-path ranks start from the server (``NOTEBOOK_LAUNCHER_START_SERVER`` is not "off")."""
    return os.environ.get("NOTEBOOK_LAUNCHER_START_SERVER", "on").lower() not in ("off", "0", "no", "false")


def _import_time_environment(env: dict) -> dict:
    return {key: value for key, value in env.items() if key.startswith(_IMPORT_TIME_PREFIXES)}


class StartServer:
    """One running start server process and the socket to it."""

    def __init__(self) -> None:
        self.info: dict[str, Any] = {}
        self.state = "starting"
        self.ranks_started = 0
        self.live_ranks = 0
        self.started_at = time.time()
        self.environment = _import_time_environment(dict(os.environ))
        self._lock = threading.Lock()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "notebook_launcher.rank.start_server", str(theirs.fileno()), str(os.getpid())],
                stdin=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
            )
        finally:
            theirs.close()
        self._socket = ours
        self.pid = self._process.pid

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        """Block until the server has imported torch and answers (raises ``LaunchError`` if it cannot)."""
        if self.state == "warm":
            return
        reply = self._receive(timeout, "while starting")
        self.info = reply["ready"]
        self.state = "warm"
        _changed()

    def start_rank(self, spec: Any, payload_fd: int, pipes: Any, preload: tuple[str, ...] = ()) -> ServedProcess:
        """Have the server fork one rank writing to ``pipes`` that loads the payload file
        ``payload_fd``, having imported ``preload`` first (once: its later ranks inherit them);
        the started rank."""
        exit_r, exit_w = os.pipe()
        request = {"spec": spec, "env": dict(os.environ), "cwd": os.getcwd(), "preload": preload}
        try:
            with self._lock:
                self.wait_ready()
                try:
                    socket.send_fds(
                        self._socket,
                        [pickle.dumps(request)],
                        [pipes.events, pipes.stdout, pipes.stderr, exit_w, payload_fd],
                    )
                except OSError as err:
                    self._failed()
                    raise LaunchError(f"the start server (pid {self.pid}) is gone: {err}") from None
                reply = self._receive(30.0 + PRELOAD_TIMEOUT * bool(preload), "while starting a rank")
        except BaseException:
            os.close(exit_r)
            raise
        finally:
            os.close(exit_w)
        if "error" in reply:
            os.close(exit_r)
            raise LaunchError(f"the start server could not start rank {spec.rank}: {reply['error']}")
        self.ranks_started += 1
        self.live_ranks += 1
        _changed()
        return ServedProcess(reply["pid"], exit_r, self)

    def _receive(self, timeout: float, doing: str) -> dict:
        ready, _, _ = select.select([self._socket], [], [], timeout)
        message = self._socket.recv(1 << 20) if ready else None
        if not message:
            why = f"took more than {timeout:g} s {doing}" if not ready else f"{self.ending()} {doing}"
            self._failed()
            raise LaunchError(
                f"the spawn start server {why}; its errors are in the kernel's log."
                " Set NOTEBOOK_LAUNCHER_START_SERVER=off to start every rank as a fresh interpreter"
            )
        return pickle.loads(message)

    def ending(self) -> str:
        """How the server ended, as a phrase: "(pid 42) was killed by signal SIGKILL"."""
        try:
            code = self._process.wait(1.0)  # it closed its socket: it is ending, if not gone already
        except subprocess.TimeoutExpired:
            return f"(pid {self.pid}) closed its socket"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = str(-code)
            return f"(pid {self.pid}) was killed by signal {name}"
        return f"(pid {self.pid}) exited with code {code}"

    def _failed(self) -> None:
        self.state = "failed"
        self.close()

    def usable(self) -> bool:
        return self.state != "failed" and self._process.poll() is None

    def close(self) -> None:
        """Close the socket: the server exits (its ranks with it)."""
        try:
            self._socket.close()
        except OSError:
            pass
        try:
            self._process.wait(5)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        if self.state != "failed":
            self.state = "stopped"
        _changed()

    def describe(self) -> dict:
        return {
            "state": self.state,
            "pid": self.pid,
            "ranks_started": self.ranks_started,
            "live_ranks": self.live_ranks,
            "started_at": self.started_at,
            **self.info,
        }


class ServedProcess(StartedProcess):
    """A rank forked by the start server: its exit code arrives on the exit pipe."""

    def __init__(self, pid: int, exit_pipe: int, server: StartServer) -> None:
        self._exit_pipe: int | None = exit_pipe
        self._server = server
        self._code: int | None = None
        super().__init__(pid, exit_pipe)

    def wait(self, timeout: float | None = None) -> int | None:
        if self._code is not None or self._exit_pipe is None:
            return self._code
        ready, _, _ = select.select([self._exit_pipe], [], [], timeout)
        if not ready:
            return None
        data = os.read(self._exit_pipe, _EXIT_CODE.size)
        if len(data) == _EXIT_CODE.size:
            self._code = _EXIT_CODE.unpack(data)[0]
        else:  # the server died before reaping the rank, which died with it (PDEATHSIG)
            self._code = -9
            self.lost = f"its start server {self._server.ending()}"
        return self._code

    def release(self) -> None:
        self.wait()
        if self._exit_pipe is not None:
            os.close(self._exit_pipe)
            self._exit_pipe = None
            _registry.rank_ended(self._server)
        super().release()


class _Registry:
    """The kernel's current start server, and the ones retired while their ranks still run."""

    def __init__(self) -> None:
        self.current: StartServer | None = None
        self.retired: list[StartServer] = []
        self.lock = threading.Lock()
        self.atexit_registered = False

    def server(self) -> StartServer:
        with self.lock:
            current = self.current
            stale = current is not None and (
                not current.usable() or current.environment != _import_time_environment(dict(os.environ))
            )
            if current is not None and stale:
                self._retire(current)
                current = None
            if current is None:
                if not self.atexit_registered:
                    atexit.register(shutdown_start_server)
                    self.atexit_registered = True
                current = self.current = StartServer()
        _changed()
        return current

    def _retire(self, server: StartServer) -> None:
        self.current = None
        if server.live_ranks == 0 or not server.usable():
            server.close()
        else:
            self.retired.append(server)

    def rank_ended(self, server: StartServer) -> None:
        with self.lock:
            server.live_ranks -= 1
            if server in self.retired and server.live_ranks == 0:
                self.retired.remove(server)
                server.close()
        _changed()

    def shutdown(self) -> None:
        with self.lock:
            for server in [*self.retired, *([self.current] if self.current else [])]:
                server.close()
            self.retired.clear()
            self.current = None


_registry = _Registry()


def start_server_info() -> dict:
    """The kernel's start server as the sidebar shows it: state, pid, what it preloaded, ranks started.

    Examples:
        >>> start_server_info()["enabled"] in (True, False)
        True
    """
    current = _registry.current
    if current is None:
        return {"state": "off" if not server_enabled() else "not started", "enabled": server_enabled()}
    return {**current.describe(), "enabled": server_enabled()}


_observers: list = []


def observe_start_server(callback) -> Any:
    """Call ``callback(start_server_info())`` whenever the server changes; returns an unsubscribe function."""
    _observers.append(callback)
    return lambda: _observers.remove(callback) if callback in _observers else None


def _changed() -> None:
    if not _observers:
        return
    info = start_server_info()
    for callback in list(_observers):
        try:
            callback(info)
        except Exception:  # a closed front end must not break a launch
            pass


def shutdown_start_server() -> None:
    """Stop the start server (it is started again on the next spawn-path launch)."""
    _registry.shutdown()


class ServerStarter(SpawnStarter):
    """Spawn semantics (function and arguments by value, a device runtime untouched), ranks forked
    from the warm start server."""

    name = "spawn"

    def prepare(self, plan):
        super().prepare(plan)
        self._preload = COMPILER_MODULES if compiles(plan.function) else ()

    def start(self, plan, specs, pipes):
        (spec,) = specs
        return _registry.server().start_rank(spec, self.payload_fd, pipes, self._preload)
