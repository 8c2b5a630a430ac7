"""Where the workers' connections wait until they have said who they are.

``Lobby`` accepts connections on the workers' socket and reads each one's hello (``hello``) as its
bytes arrive, all at once: one that stays silent, sends too little or the wrong token holds up no
other, and is closed after ``HELLO_TIMEOUT`` (or when the lobby closes).

Examples:
    >>> import os, socket, tempfile
    >>> from multiprocessing.connection import Connection
    >>> from notebook_launcher.workers.hello import send_hello
    >>> address = os.path.join(tempfile.mkdtemp(), "socket")
    >>> server = socket.socket(socket.AF_UNIX); server.bind(address); server.listen()
    >>> silent = socket.socket(socket.AF_UNIX); silent.connect(address)
    >>> worker = socket.socket(socket.AF_UNIX); worker.connect(address)
    >>> send_hello(Connection(worker.detach()), b"k" * 16, rank=0, pid=99)
    >>> with Lobby(server, b"k" * 16) as lobby:   # each call accepts or reads what is ready
    ...     arrived = [hello for _ in range(4) for hello in lobby.arrivals(1.0)]
    >>> [(rank, pid) for rank, pid, _ in arrived]   # the silent connection held up nothing
    [(0, 99)]
"""

from __future__ import annotations

import select
import socket
import time
from multiprocessing.connection import Connection

from .hello import HelloReader

__all__ = ["HELLO_TIMEOUT", "Lobby"]

HELLO_TIMEOUT = 10.0  # seconds a connection may take to send its hello


class Lobby:
    """Connections to ``server`` that have not yet proven, with ``token``, that they are workers."""

    def __init__(self, server: socket.socket, token: bytes, hello_timeout: float = HELLO_TIMEOUT) -> None:
        self._server = server
        self._token = token
        self._hello_timeout = hello_timeout
        self._waiting: dict[socket.socket, tuple[HelloReader, float]] = {}

    def arrivals(self, timeout: float) -> list[tuple[int, int, Connection]]:
        """(rank, pid, connection) of each connection whose hello completed within ``timeout``."""
        now = time.monotonic()
        for sock in [sock for sock, (_, until) in self._waiting.items() if until < now]:
            del self._waiting[sock]
            sock.close()
        arrived = []
        for sock in select.select([self._server, *self._waiting], [], [], timeout)[0]:
            if sock is self._server:
                accepted, _ = self._server.accept()
                accepted.setblocking(False)
                self._waiting[accepted] = (HelloReader(self._token), now + self._hello_timeout)
                continue
            reader, _ = self._waiting[sock]
            try:
                hello = reader.feed(sock.recv(reader.missing))
            except BlockingIOError:
                continue
            except (OSError, ValueError):  # closed, too much, not this launch's token
                del self._waiting[sock]
                sock.close()
                continue
            if hello is not None:
                del self._waiting[sock]
                sock.setblocking(True)
                arrived.append((*hello, Connection(sock.detach())))
        return arrived

    def close(self) -> None:
        """Close every connection still waiting."""
        for sock in self._waiting:
            sock.close()
        self._waiting.clear()

    def __enter__(self) -> Lobby:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
