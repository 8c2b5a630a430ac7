"""The first bytes a worker sends on its connection: the launch's token, then its rank and pid.

Both are raw, fixed-size frames of ``multiprocessing.connection`` (a 4-byte length, then the bytes),
so the kernel reads them without unpickling anything and without blocking on any one connection:
``HelloReader`` takes whatever bytes a socket has, and a connection that says nothing, too little
or the wrong token is closed without holding up the workers that answer (a process of this user
that connects and stays silent cost ``%dist start`` 10 s each).

Examples:
    >>> import socket
    >>> from multiprocessing.connection import Connection
    >>> ours, theirs = socket.socketpair()
    >>> send_hello(Connection(theirs.detach()), b"t" * 16, rank=1, pid=4321)
    >>> reader = HelloReader(b"t" * 16)
    >>> reader.feed(ours.recv(HELLO_SIZE))
    (1, 4321)
"""

from __future__ import annotations

import hmac
import struct
from multiprocessing.connection import Connection

__all__ = ["HELLO_SIZE", "HelloReader", "send_hello"]

TOKEN_SIZE = 16
_FRAME = struct.Struct("!i")  # multiprocessing.connection's length prefix
_IDENTITY = struct.Struct("!iq")  # rank, pid
HELLO_SIZE = 2 * _FRAME.size + TOKEN_SIZE + _IDENTITY.size


def send_hello(connection: Connection, token: bytes, rank: int, pid: int) -> None:
    """Prove to the kernel that this is rank ``rank`` (pid ``pid``) of the launch that has ``token``."""
    connection.send_bytes(token)
    connection.send_bytes(_IDENTITY.pack(rank, pid))


class HelloReader:
    """Collects one connection's hello as its bytes arrive.

    ``feed`` returns (rank, pid) once the whole hello came and the token is right, None while it is
    still incomplete, and raises ``ValueError`` for anything else (the connection is then closed).
    """

    def __init__(self, token: bytes) -> None:
        if len(token) != TOKEN_SIZE:
            raise ValueError(f"a token is {TOKEN_SIZE} bytes, not {len(token)}")
        self._token = token
        self._received = b""

    @property
    def missing(self) -> int:
        """How many bytes of the hello have not arrived (read no more than this: what follows is a call's)."""
        return HELLO_SIZE - len(self._received)

    def feed(self, data: bytes) -> tuple[int, int] | None:
        if not data:
            raise ValueError("the connection closed before its hello")
        if len(data) > self.missing:
            raise ValueError("more bytes than a hello")
        self._received += data
        if self.missing:
            return None
        (token_size,) = _FRAME.unpack_from(self._received, 0)
        token = self._received[_FRAME.size : _FRAME.size + TOKEN_SIZE]
        (identity_size,) = _FRAME.unpack_from(self._received, _FRAME.size + TOKEN_SIZE)
        if token_size != TOKEN_SIZE or identity_size != _IDENTITY.size or not hmac.compare_digest(token, self._token):
            raise ValueError("not this launch's token")
        rank, pid = _IDENTITY.unpack_from(self._received, 2 * _FRAME.size + TOKEN_SIZE)
        return rank, pid
