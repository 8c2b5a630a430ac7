"""Keeping the kernel alive when its Ray head dies: watch the head, and leave its cluster in time.

A kernel connected as a Ray driver is ended by Ray itself (the whole process, every variable in
it) about a minute after the cluster's head stops answering. So while the kernel is connected, a
thread probes the head's address (its port, then a gRPC handshake, which a hung head does not
give); once it has not answered for ``LOST_AFTER`` seconds, the head is
*lost*: the running launch's ranks end with that reason, nothing more is asked of the dead cluster,
and once no launch uses it the kernel leaves it (``ray.shutdown()``), well before Ray's deadline.
The next cluster launch connects again, to the same address once a head answers there or to another.

``HeadLiveness`` is the policy (pure, tested with a fake clock); ``HeadWatch`` the thread.

Examples:
    >>> state = HeadLiveness(lost_after=3.0)
    >>> state.observe(answered=False, now=10.0), state.observe(answered=False, now=12.0)
    (False, False)
    >>> state.observe(answered=False, now=13.0)
    True
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ...errors import LaunchError

__all__ = [
    "HeadLiveness",
    "HeadWatch",
    "watch",
    "watching",
    "stop_watching",
    "lost_reason",
    "head_answers",
    "unreachable",
    "wait_left",
    "loss_named",
    "ignored_once_lost",
]

LOST_AFTER = 3.0  # seconds without an answer from the head before it is taken as lost
PROBE_EVERY = 0.5  # seconds between probes
PROBE_TIMEOUT = 1.0  # seconds one probe waits for the head's port to accept
HANDSHAKE_TIMEOUT = 2.0  # seconds it then waits for the head's gRPC handshake (generous: a loaded machine)
LEAVE_WAIT = 15.0  # seconds a lost head waits for the launch using it to end before the kernel leaves anyway


class HeadLiveness:
    """Whether the head is lost, from probe results in time order: lost once every probe of the
    last ``lost_after`` seconds went unanswered (one answer resets it)."""

    def __init__(self, lost_after: float = LOST_AFTER) -> None:
        self.lost_after = lost_after
        self._silent_since: float | None = None

    def observe(self, answered: bool, now: float) -> bool:
        """Take one probe's result at ``now`` (monotonic seconds); True once the head is lost.

        Examples:
            >>> state = HeadLiveness(lost_after=3.0)
            >>> state.observe(False, now=0.0), state.observe(True, now=2.0), state.observe(False, now=4.0)
            (False, False, False)
            >>> state.observe(False, now=7.0)
            True
        """
        if answered:
            self._silent_since = None
            return False
        if self._silent_since is None:
            self._silent_since = now
        return now - self._silent_since >= self.lost_after


def unreachable(address: str, timeout: float = 3.0) -> str | None:
    """Why nothing listens at ``host:port`` (or ``ray://host:port``), or None: something does, or
    the address is not of that form ("auto", which Ray resolves itself).

    Examples:
        >>> unreachable("auto") is None
        True
        >>> "refused" in unreachable("127.0.0.1:1")
        True
    """
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return None
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as err:
        return f"nothing answers at {host}:{port} ({err.strerror or err})"
    return None


def head_answers(address: str, timeout: float = PROBE_TIMEOUT) -> bool:
    """Whether the head's server at ``address`` ("host:port", "[v6]:port", "ray://host:port")
    answers: its port accepts a connection, and the server itself takes part in a gRPC channel's
    HTTP/2 handshake. A hung head (a stopped process, a stuck GCS) still has its port accept
    connections (the operating system completes them), so the port alone is not an answer.

    Examples:
        >>> head_answers("127.0.0.1:1")
        False
    """
    if unreachable(address, timeout) is not None:
        return False
    return _handshakes(address.removeprefix("ray://"), max(timeout, HANDSHAKE_TIMEOUT))


def _handshakes(address: str, timeout: float) -> bool:
    try:
        import grpc  # Ray's own dependency
    except ImportError:  # (not with a Ray installed: the port answered, which is all that can be told)
        return True
    channel = grpc.insecure_channel(address)
    try:
        grpc.channel_ready_future(channel).result(timeout=timeout)
        return True
    except grpc.FutureTimeoutError:
        return False
    finally:
        channel.close()


class HeadWatch(threading.Thread):
    """Probes ``address`` until stopped; on loss sets ``reason`` and calls ``on_lost(reason)``."""

    def __init__(
        self,
        address: str,
        on_lost: Callable[[str], None],
        probe: Callable[[str], bool] = head_answers,
        clock: Callable[[], float] = time.monotonic,
        every: float = PROBE_EVERY,
    ) -> None:
        super().__init__(name="notebook-launcher-ray-head-watch", daemon=True)
        self.address = address
        self.reason: str | None = None
        self.left = threading.Event()  # set once the kernel has left the lost cluster
        self._on_lost = on_lost
        self._probe = probe
        self._clock = clock
        self._every = every
        self._stopped = threading.Event()

    def run(self) -> None:
        liveness = HeadLiveness()
        while not self._stopped.wait(self._every):
            if liveness.observe(self._probe(self.address), self._clock()):
                self.reason = _gone(self.address, f"stopped answering at {time.strftime('%H:%M:%S')}")
                try:
                    self._on_lost(self.reason)
                finally:
                    self.left.set()
                return

    def stop(self) -> None:
        self._stopped.set()


def _gone(address: str, what: str) -> str:
    """The reason a launch ends when the head at ``address`` is lost.

    Examples:
        >>> _gone("10.0.0.1:6379", "does not answer")  # doctest: +ELLIPSIS
        'the Ray head at 10.0.0.1:6379 does not answer: the cluster is gone; this kernel leaves it and lives on ...'
    """
    return (
        f"the Ray head at {address} {what}: the cluster is gone; this kernel leaves it and lives on"
        " (launch again: locally, or on a cluster once one answers)"
    )


_watch: HeadWatch | None = None


def watch(address: str, on_lost: Callable[[str], None]) -> HeadWatch:
    """Start watching the head at ``address`` (the one watch of this kernel; a previous one stops)."""
    global _watch
    if _watch is not None:
        _watch.stop()
    _watch = HeadWatch(address, on_lost)
    _watch.start()
    return _watch


def stop_watching() -> None:
    """Stop watching (a connection that was never made)."""
    global _watch
    if _watch is not None:
        _watch.stop()
        _watch = None


def watching(address: str | None = None) -> bool:
    """Whether a head (the one at ``address``, if given) is being watched now, and has not been lost."""
    current = _watch
    if current is None or not current.is_alive() or current.reason is not None:
        return False
    return address is None or current.address == address


def lost_reason(check_now: bool = False) -> str | None:
    """Why the watched head is lost, or None while it answers (or nothing is watched).

    ``check_now``: probe once now instead of waiting for the watch to decide (a rank's actor has
    just died: was it its node, or the head?).
    """
    current = _watch
    if current is None:
        return None
    if current.reason is None and check_now and not head_answers(current.address):
        return _gone(current.address, "does not answer")
    return current.reason


def wait_left(timeout: float) -> None:
    """If the watched head was lost, wait up to ``timeout`` s for the kernel to have left its cluster."""
    current = _watch
    if current is not None and current.reason is not None:
        current.left.wait(timeout)


@contextmanager
def loss_named() -> Iterator[None]:
    """Around calls to the cluster: what a call raises because the head is lost (a connection
    error, a client shutting down as the kernel leaves) becomes a ``LaunchError`` that names the head.

    Examples:
        >>> with loss_named():
        ...     raise ValueError("not the cluster's doing")
        Traceback (most recent call last):
        ...
        ValueError: not the cluster's doing
    """
    try:
        yield
    except LaunchError:
        raise
    except Exception:
        reason = lost_reason(check_now=True)
        if reason is None:
            raise
        raise LaunchError(reason) from None


@contextmanager
def ignored_once_lost() -> Iterator[None]:
    """Around a call that tidies up on the cluster (end a rank, close its store): what it raises
    once the head is lost is ignored, as what it would tidy went with the cluster.

    Examples:
        >>> with ignored_once_lost():  # nothing is lost: the error is the caller's
        ...     raise RuntimeError("Ray Client is not connected")
        Traceback (most recent call last):
        ...
        RuntimeError: Ray Client is not connected
    """
    try:
        yield
    except Exception:
        if lost_reason() is None:
            raise
