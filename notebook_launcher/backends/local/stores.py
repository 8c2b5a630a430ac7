"""Hosting and reaching a rendezvous ``TCPStore`` bound to one address (never every interface).

The kernel binds the socket itself and hands it to ``torch.distributed.TCPStore``
(``master_listen_fd``): only ``master_addr`` is listened on, and the race between picking a free
port and using it is gone. ``listening`` asks whether a store answers without torch's client, which
retries a closed port for seconds and prints a C++ stack at each try.

Example::

    store = host_store("127.0.0.1", None, workers=2, timeout=60.0)   # store.port: the one picked
"""

from __future__ import annotations

import datetime
import socket
from typing import Any

from ...errors import LaunchError

__all__ = ["host_store", "bind", "listening"]


def host_store(
    address: str, port: int | None, workers: int, timeout: float, listener: socket.socket | None = None
) -> Any:
    """A TCPStore server bound to ``address`` only (``port`` None: a free one), on ``listener``
    when it is already bound. Its port is ``store.port``.

    Examples:
        >>> store = host_store("127.0.0.1", None, workers=1, timeout=10.0)
        >>> store.set("k", "v"); store.get("k")
        b'v'
    """
    import torch.distributed as dist

    listener = listener or bind(address, port)
    # the store takes the socket over (and closes it when it is deleted)
    return dist.TCPStore(
        address,
        listener.getsockname()[1],
        max(1, workers),
        True,
        timeout=datetime.timedelta(seconds=timeout),
        wait_for_workers=False,
        master_listen_fd=listener.detach(),
        use_libuv=True,
    )


def listening(address: str, port: int) -> bool:
    """Whether something accepts connections at ``address:port``, asked without torch: its client
    retries a closed port for seconds (deaf to a stop meanwhile) and prints a C++ stack into the cell
    at each try.

    Examples:
        >>> store = host_store("127.0.0.1", None, workers=1, timeout=5.0)
        >>> listening("127.0.0.1", store.port)
        True
    """
    try:
        with socket.create_connection((address, port), timeout=0.5):
            return True
    except OSError:
        return False


def bind(address: str, port: int | None) -> socket.socket:
    """A listening socket on ``address:port`` (``port`` None: a free one), or a ``LaunchError``
    saying the port is taken."""
    listener = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((address, port or 0))
        listener.listen(1024)
    except OSError as err:
        listener.close()
        taken = f"port {port} is already in use on {address}" if port else str(err)
        raise LaunchError(
            f"cannot host the rendezvous store: {taken}; pass another use_port, or use_port=None to pick a free one"
        ) from err
    return listener
