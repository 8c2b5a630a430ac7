"""The kernel's server sockets, which a rank forked from it closes first.

A forked rank holds a copy of every descriptor the kernel had open: the kernel's ZeroMQ sockets
(the ports the notebook connects to), the rendezvous stores it hosts, any server a cell started.
The rank never serves any of them, but while it holds a listening socket the port stays taken
(a fixed ``use_port`` is "already in use" for as long as persistent workers run), and a connection
it holds stays open after the kernel closed its end. So each forked rank, before it runs
anything, reads which of its descriptors are sockets on ports the kernel listens on (the listeners
and the connections they accepted) and closes them. It reads its own copy: a list the kernel noted
before forking would miss a connection accepted since and could name a number the kernel closed
and reused since. Sockets a cell opened to other servers (a database client the function uses)
are kept.

Example (what the fork starter does, in each forked rank first)::

    close_descriptors(served_sockets())
"""

from __future__ import annotations

import os
import stat

__all__ = ["served_sockets", "close_descriptors"]


def served_sockets() -> tuple[int, ...]:
    """The descriptors of this process's sockets on the ports it listens on.

    Examples:
        >>> import socket
        >>> server = socket.create_server(("127.0.0.1", 0))
        >>> server.fileno() in served_sockets()
        True
        >>> server.close()
    """
    import psutil

    try:
        connections = psutil.Process().net_connections(kind="inet")
    except (psutil.Error, OSError):  # /proc unreadable here: the ranks keep the copies, as before
        return ()
    listening = {conn.laddr.port for conn in connections if conn.status == psutil.CONN_LISTEN and conn.laddr}
    return tuple(
        sorted(conn.fd for conn in connections if conn.fd >= 0 and conn.laddr and conn.laddr.port in listening)
    )


def close_descriptors(descriptors: tuple[int, ...]) -> None:
    """Close those of ``descriptors`` that are still sockets (in a forked rank: the kernel's copies
    it must not keep). A number the kernel reused since it noted them, for the rank's own pipes, is
    not a socket and stays open."""
    for fd in descriptors:
        try:
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                os.close(fd)
        except OSError:
            pass
