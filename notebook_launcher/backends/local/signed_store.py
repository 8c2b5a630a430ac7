"""Node-to-node messages on the rendezvous store, signed with the launch's secret.

torch's ``TCPStore`` has no authentication: any process that can reach its port can read and write
keys. The nodes of a launch therefore never trust a value they did not sign: each value is written
as ``<hmac>:<text>``, the HMAC (SHA-256) taken with the secret every node's cell was given over the
run id, the attempt, the session, the key and the text. A value that fails the check is ignored as
if it were absent (a forged "node 1 failed" cannot end a launch) and counted, so a wait that times
out can say that someone wrote to the store. Values are text: nothing read from a store is ever
unpickled.

The run id and the attempt are the same in every launch of a notebook, so a value recorded from
one launch would verify in the next: the session is what tells launches apart. The node that hosts
a store draws a random one and signs it as the store's first value (before it, ``session`` is "");
every later message is signed with it (``Rendezvous`` makes the other nodes check it is fresh).

Examples:
    >>> import datetime, torch.distributed as dist
    >>> store = dist.HashStore()
    >>> signed = SignedStore(store, b"secret", run_id="run", attempt=0, session="a1")
    >>> signed.set("failed", "node 1: rank 3 failed")
    >>> signed.get("failed")
    'node 1: rank 3 failed'
    >>> store.set("notebook_launcher/run/0/failed", "forged")
    >>> signed.get("failed") is None, signed.forged
    (True, 1)
    >>> signed.set("failed", "node 1: rank 3 failed")   # recorded in session a1, replayed in b2:
    >>> SignedStore(store, b"secret", run_id="run", attempt=0, session="b2").get("failed") is None
    True
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

__all__ = ["SignedStore"]


class SignedStore:
    """Signed text values on a store, under ``notebook_launcher/<run id>/<attempt>/``."""

    def __init__(self, store: Any, secret: bytes, run_id: str, attempt: int, session: str = "") -> None:
        self.store = store
        self._secret = secret
        self._run_id, self._attempt = run_id, attempt
        self._prefix = f"notebook_launcher/{run_id}/{attempt}/"
        self.session = session
        self.forged = 0  # values that failed the check

    def in_session(self, session: str) -> SignedStore:
        """The same store, its messages signed in ``session`` (a store host's random draw)."""
        return SignedStore(self.store, self._secret, self._run_id, self._attempt, session)

    def raw(self, key: str) -> str | None:
        """The text under ``key`` as it is, unchecked (what another node asks to have signed)."""
        full = self._prefix + key
        return self.store.get(full).decode("utf-8", "replace") if self.store.check([full]) else None

    def put_raw(self, key: str, text: str) -> None:
        """Write ``text`` unsigned (a challenge: its answer is what is signed)."""
        self.store.set(self._prefix + key, text)

    def set(self, key: str, text: str) -> None:
        self.store.set(self._prefix + key, f"{self._mac(key, text)}:{text}")

    def get(self, key: str) -> str | None:
        """The signed text under ``key``; None when it is absent or not signed with the secret."""
        full = self._prefix + key
        if not self.store.check([full]):
            return None
        mac, _, text = self.store.get(full).decode("utf-8", "replace").partition(":")
        if not hmac.compare_digest(mac, self._mac(key, text)):
            self.forged += 1
            return None
        return text

    def count(self, key: str, by: int = 1) -> int:
        """Add ``by`` to the counter ``key`` (an arrival; 0 reads it) and return it (counters cannot
        be signed: a forged increment can only make a wait time out, which then says so)."""
        return int(self.store.add(self._prefix + key, by))

    def _mac(self, key: str, text: str) -> str:
        message = f"{self._prefix}{self.session}\0{key}\0{text}".encode()
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()
