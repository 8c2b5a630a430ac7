"""Rendezvous ports: a fresh free one per launch, or a check that the user's fixed one is free.

Examples:
    >>> 1024 <= free_port("127.0.0.1") <= 65535
    True
"""

from __future__ import annotations

import socket

from ..errors import LaunchError

__all__ = ["free_port", "check_port_free"]


def free_port(addr):
    """A port nobody listens on at ``addr`` now (the OS picks it; the socket is closed at once)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((addr, 0))
        except OSError:
            sock.bind(("", 0))
        return sock.getsockname()[1]


def check_port_free(addr, port):
    """Raise ``LaunchError`` when ``port`` is taken on ``addr`` (skipped when ``addr`` is not local).

    Bound as torch's store binds it, with ``SO_REUSEADDR``: a port left in TIME-WAIT by the last
    launch (for a minute after node 0 ended first) is free for the store, and so for this check.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((addr, port))
        except OSError as err:
            if err.errno == 99:  # EADDRNOTAVAIL: the address is another host's; it checks its own port
                return
            raise LaunchError(
                f"use_port={port} is already in use on {addr}; pass another port, or use_port=None to pick a free one"
            ) from None
