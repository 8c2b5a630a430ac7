"""The kernel's Ray driver, in a process of its own: a head lost while the kernel connects cannot
end the kernel.

A Ray driver is a C++ core worker inside the process that calls ``ray.init``. When the head (and its
raylet) goes away while that worker registers, or soon after, Ray ends the whole process at once
("Failed to register worker to Raylet"), about a second after the loss: too soon for any watch, and
no thread can survive it. So the kernel never becomes a driver itself. ``DriverProcess.start``
runs ``driver_main.py`` as a child of the kernel: it calls ``ray.init(address)`` there and serves Ray
Client (Ray's own server, ``ray.util.client.server``) on a loopback port, and the kernel connects
to it as a Ray Client (``ray://127.0.0.1:PORT``), which only speaks gRPC: a lost head or a dead
driver process reaches the kernel as an error, never as its end. The child ends when the kernel
closes its standard input (``stop``), or when the kernel itself ends (the pipe closes with it).

Examples:
    >>> ready = DriverReady.parse('{"client": "ray://127.0.0.1:41000", "gcs": "10.0.0.1:6379", "node": "10.0.0.9"}')
    >>> ready.client_address, ready.gcs_address, ready.node_address
    ('ray://127.0.0.1:41000', '10.0.0.1:6379', '10.0.0.9')
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ...errors import LaunchError

__all__ = ["DriverProcess", "DriverReady", "DriverEnded"]

MAIN = Path(__file__).with_name("driver_main.py")  # a script: it imports Ray alone, not this package
POLL = 0.25  # seconds between looks at the head while the driver process connects
STOP_WAIT = 10.0  # seconds the driver process has to leave the cluster once told, before SIGKILL


@dataclass(frozen=True)
class DriverReady:
    """What the driver process says once connected: where its Ray Client server listens, the
    address of the cluster's head (its GCS) as Ray resolved it, and the node address it took."""

    client_address: str
    gcs_address: str
    node_address: str

    @classmethod
    def parse(cls, line: str) -> DriverReady:
        """The driver process's first line; ``DriverEnded`` for the error line it writes instead.

        Examples:
            >>> DriverReady.parse('{"error": "ConnectionError: no head"}')
            Traceback (most recent call last):
            ...
            notebook_launcher.backends.ray.driver_process.DriverEnded: ConnectionError: no head
        """
        said = json.loads(line)
        if "error" in said:
            raise DriverEnded(said["error"])
        return cls(client_address=said["client"], gcs_address=said["gcs"], node_address=said["node"])


class DriverEnded(LaunchError):
    """The driver process could not connect to the cluster, or ended (its last words say why)."""


class DriverProcess:
    """The kernel's Ray driver process (one per connection), started by ``start``."""

    def __init__(self, process: subprocess.Popen, log: int, ready: DriverReady) -> None:
        self.process = process
        self.ready = ready
        self._log = log

    @classmethod
    def start(cls, address: str, timeout: float, lost: Callable[[], str | None] = lambda: None) -> DriverProcess:
        """Start the driver process for the cluster at ``address`` ("host:port" or "auto") and wait
        up to ``timeout`` s for it to connect; ``lost()`` says (not None) when the head is lost
        meanwhile, which ends the wait at once, as does an interrupt.

        Raises:
            DriverEnded: it could not connect, or ended while connecting (its last words say why).
        """
        process: subprocess.Popen | None = None
        fd = -1
        try:  # an interrupt at any point ends what was started
            with tempfile.TemporaryFile(prefix="notebook-launcher-ray-driver-") as log:  # unnamed: gone with its fds
                process = subprocess.Popen(
                    [sys.executable, str(MAIN), address],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=log,
                    env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
                    start_new_session=True,  # a kernel interrupt (SIGINT to its group) is the kernel's alone
                )
                fd = os.dup(log.fileno())
            line = _first_line(process, fd, timeout, lost)
            return cls(process, fd, DriverReady.parse(line.decode()))
        except BaseException:
            if process is not None:
                _end(process)
            if fd >= 0:
                os.close(fd)
            raise

    def stop(self, wait: float = STOP_WAIT) -> None:
        """Tell the driver process to leave the cluster and end; SIGKILL it after ``wait`` s."""
        _end(self.process, wait)
        if self._log >= 0:
            os.close(self._log)
            self._log = -1


def _first_line(process: subprocess.Popen, log: int, timeout: float, lost: Callable[[], str | None]) -> bytes:
    """The driver process's first line, read within ``timeout`` s unless ``lost()`` says why not."""
    stdout = process.stdout
    assert stdout is not None
    deadline = time.monotonic() + timeout
    while not select.select([stdout], [], [], min(POLL, max(0.0, deadline - time.monotonic())))[0]:
        reason = lost()
        if reason is not None:
            raise DriverEnded(reason)
        if time.monotonic() >= deadline:
            raise DriverEnded(f"Ray's driver process did not connect within {timeout:g} s{_tail(log)}")
    line = stdout.readline()  # it writes its one line whole, at once
    if not line:
        process.wait()
        raise DriverEnded(f"Ray's driver process ended ({_exit_status(process)}) while it connected{_tail(log)}")
    return line


def _end(process: subprocess.Popen, wait: float = 0.0) -> None:
    try:
        if process.stdin is not None:
            process.stdin.close()  # its sign to leave: it reads its standard input to the end
    except OSError:
        pass
    try:
        process.wait(wait)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    if process.stdout is not None:
        process.stdout.close()


def _tail(fd: int, size: int = 2000) -> str:
    """``": <the last lines of the log>"``, or "" when it is empty."""
    try:
        end = os.fstat(fd).st_size
        text = os.pread(fd, size, max(0, end - size)).decode(errors="replace").strip()
    except OSError:
        return ""
    return f": {text}" if text else ""


def _exit_status(process: subprocess.Popen) -> str:
    """How a driver process ended, as a person reads it.

    Examples:
        >>> class Ended:
        ...     returncode = -6
        >>> _exit_status(Ended())
        'killed by signal 6'
    """
    code = process.returncode
    return f"killed by signal {-code}" if code is not None and code < 0 else f"exit status {code}"
