"""Reaching the Ray cluster from the kernel: Ray imported with a clear error, connected once.

The kernel becomes a Ray *driver* of the cluster ``ray.init()`` would find (``RAY_ADDRESS``, or a
head already running on this machine), or of a Ray Client address (``ray://host:10001``). It never
starts a cluster of its own: a launch that finds none says which address it tried. A kernel that
called ``ray.init`` itself keeps its connection. Either way the head is watched (``head_watch``):
when it is lost, the kernel leaves its cluster before Ray would end the kernel for it.

Examples:
    >>> ray_address_tried(None, {"RAY_ADDRESS": "10.0.0.1:6379"})
    '10.0.0.1:6379'
    >>> ray_address_tried(None, {})
    'auto'
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from typing import Any, NoReturn

from ...errors import LaunchError
from . import head_watch
from .driver_process import DriverEnded, DriverProcess

__all__ = ["import_ray", "connect", "ray_address_tried", "driver_addresses"]

# the address this kernel connected to (for "auto", the head Ray found; "" after a ray.init of the user's)
connected_address = ""
_driver: DriverProcess | None = None  # the kernel's driver process, while connected through one
CONNECT_TIMEOUT = 120.0  # seconds the driver process may take to connect (a loaded machine, a far head)
CLIENT_LEAVE_WAIT = 2.0  # seconds a launch through the driver process has to end by itself once the head is lost
SHUTDOWN_WAIT = 15.0  # seconds ``ray.shutdown()`` may take to leave a cluster whose head is gone (~5 s seen)
CLIENT_ATTEMPTS = 3  # a Ray Client connection whose server failed to start is tried again
# the head's own server for this client died as it started (a crash in gRPC's fork handling in the
# process the head forks: the check failure "next_worker->state == KICKED"); the next one usually starts
TRANSIENT_CLIENT_FAILURES = (
    "Starting Ray client server failed",
    "in start_specific_server",
    "Proxy failed to Connect to backend",
)
INSTALL_HINT = "pip install 'notebook-launcher[ray]' (or pip install ray) in this kernel's environment"


def import_ray() -> Any:
    """The ``ray`` module, or a ``LaunchError`` saying how to install it."""
    try:
        import ray
    except ImportError as err:
        raise LaunchError(f"cluster='ray' needs Ray, which this kernel cannot import ({err}): {INSTALL_HINT}") from None
    return ray


def ray_address_tried(address: str | None, environ: Mapping[str, str] = os.environ) -> str:
    """The address ``connect`` gives ``ray.init``: the launch's, else ``RAY_ADDRESS``, else "auto"."""
    return address or environ.get("RAY_ADDRESS") or "auto"


def connect(address: str | None) -> Any:
    """Connect this kernel to the cluster (once; later launches reuse the connection); ``ray``.

    Raises:
        LaunchError: Ray is not installed, or no cluster answers at the address tried.
    """
    ray = import_ray()
    head_watch.wait_left(head_watch.LEAVE_WAIT + SHUTDOWN_WAIT)
    if not ray.is_initialized():
        _init(ray, address)
    _watch_head(ray)
    return ray


def driver_addresses() -> dict[str, str]:
    """The addresses of the kernel's driver process while connected through one, else {}: its
    Ray Client server ("client"), the head it reached ("gcs") and the node address it took ("node").

    Examples:
        >>> driver_addresses()  # not connected
        {}
    """
    if _driver is None:
        return {}
    ready = _driver.ready
    return {"client": ready.client_address, "gcs": ready.gcs_address, "node": ready.node_address}


def _init(ray: Any, address: str | None) -> None:
    """Connect to the cluster at ``address`` (or the one Ray finds), with the errors ``connect`` gives:
    through a driver process of the kernel's own (``driver_process``), or as the Ray Client of a
    ``ray://`` address."""
    tried = ray_address_tried(address)
    unreachable = head_watch.unreachable(tried)
    if unreachable:
        raise LaunchError(
            f"no Ray cluster could be reached at {tried!r}: {unreachable}; is the head running, and is that"
            " address reachable from this machine?"
        )
    global connected_address, _driver
    if tried.startswith("ray://"):
        _client_init(ray, tried)
        connected_address = tried
        return
    if ":" in tried:  # a head lost or hung while the kernel connects is seen as later on
        head_watch.watch(tried, lambda reason: _leave(ray))
    try:
        _driver = _start_driver(tried)
        try:
            _client_init(ray, _driver.ready.client_address)
        except BaseException:
            _driver.stop()
            _driver = None
            raise
    except BaseException:  # not connected (an interrupt too): nothing to watch
        head_watch.stop_watching()
        raise
    connected_address = _driver.ready.gcs_address if tried == "auto" else tried
    _no_auto_init(ray)


def _no_auto_init(ray: Any) -> None:
    """Turn off Ray's ``ray.init()`` on first use in this kernel: once the kernel has left a lost
    cluster, a call of a launch still under way (or of a cell) would make the kernel a driver of
    ``RAY_ADDRESS`` itself, which the driver process is there to prevent (a cell's own ``ray.init``
    still works). Ray reads the switch (``RAY_ENABLE_AUTO_CONNECT=0``) once, as it is imported."""
    hook = getattr(getattr(ray, "_private", None), "auto_init_hook", None)
    if hook is not None and hasattr(hook, "enable_auto_connect"):
        hook.enable_auto_connect = False


def _start_driver(tried: str) -> DriverProcess:
    """The kernel's driver process, connected to the cluster at ``tried``; a ``LaunchError`` that
    names the head when it was lost meanwhile, or says why the driver could not connect."""
    try:
        return DriverProcess.start(tried, CONNECT_TIMEOUT, lost=head_watch.lost_reason)
    except DriverEnded as err:
        lost = head_watch.lost_reason(check_now=":" in tried)
        if lost is not None:
            raise LaunchError(lost) from None
        _refuse(tried, err)


def _client_init(ray: Any, client_address: str) -> None:
    """``ray.init`` a Ray Client connection to ``client_address`` (tried again where Ray's client
    server failed to start, as it now and then does)."""
    for attempt in range(1, CLIENT_ATTEMPTS + 1):
        try:
            ray.init(
                address=client_address, log_to_driver=False, logging_level=logging.WARNING, configure_logging=False
            )
            return
        except Exception as err:  # ConnectionError, or whatever Ray Client raises for a wrong address
            if attempt < CLIENT_ATTEMPTS and worth_another_try(client_address, err):
                continue
            _refuse(client_address, err, attempt)


def _watch_head(ray: Any) -> None:
    """Watch the head of the cluster this kernel is connected to (``head_watch``), once per connection."""
    try:
        if _driver is not None:
            head = _driver.ready.gcs_address
        elif ray.util.client.ray.is_connected():
            head = connected_address.removeprefix("ray://")  # the client server, the kernel's one link
        else:
            head = str(ray.get_runtime_context().gcs_address)  # the user's own ray.init
    except Exception:  # a Ray that says neither: nothing to watch
        return
    if head and not head_watch.watching(head):
        head_watch.watch(head, lambda reason: _leave(ray))


def _leave(ray: Any) -> None:
    """The head is lost: forget the warm actors, let the launch using them end, then leave the
    cluster before Ray ends this process for having lost it."""
    from .pool import forget_pool, wait_unused

    global connected_address, _driver
    forget_pool()
    # a launch through the driver process may be waiting in a call that only the client's shutdown
    # ends (``loss_named`` then names the head); one of the kernel's own driver is given time to end
    wait_unused(head_watch.LEAVE_WAIT if _driver is None else CLIENT_LEAVE_WAIT)
    leaving = threading.Thread(target=ray.shutdown, name="notebook-launcher-ray-leave", daemon=True)
    leaving.start()
    leaving.join(SHUTDOWN_WAIT)
    connected_address = ""
    if _driver is not None:
        _driver.stop()
        _driver = None


def worth_another_try(address: str, err: BaseException) -> bool:
    """Whether ``err`` from ``ray.init(address)`` is the head's Ray Client server failing to start
    this client's own server, which the next connection usually gets (Ray's client is flaky there).

    Examples:
        >>> server = ConnectionAbortedError("Starting Ray client server failed. See ray_client_server_23001.err")
        >>> worth_another_try("ray://127.0.0.1:10001", server)
        True
        >>> worth_another_try("ray://127.0.0.1:10001", ConnectionError("no such host"))
        False
    """
    return address.startswith("ray://") and any(sign in str(err) for sign in TRANSIENT_CLIENT_FAILURES)


def _refuse(tried: str, err: BaseException, attempts: int = 1) -> NoReturn:
    """Raise the ``LaunchError`` that says ``ray.init(tried)`` failed with ``err``, and what to check."""
    hint = (
        "start one with `ray start --head`, or set RAY_ADDRESS / pass cluster='ray://host:10001'"
        if tried == "auto"
        else "is the head running, and is that address reachable from this machine?"
    )
    times = f" ({attempts} tries)" if attempts > 1 else ""
    raise LaunchError(
        f"no Ray cluster could be reached at {tried!r}{times}: {type(err).__name__}: {err}; {hint}"
    ) from None
