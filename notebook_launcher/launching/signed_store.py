"""Node-to-node messages on the rendezvous store, signed with the launch's secret.

torch's ``TCPStore`` has no authentication: any process that can reach its port can read and write
keys. The nodes of a launch therefore never trust a value they did not sign: each value is written
as ``<hmac>:<text>``, the HMAC (SHA-256) taken with the secret every node's cell was given over the
run id, the attempt, the key and the text. A value that fails the check is ignored as if it were
absent (a forged "node 1 failed" cannot end a launch) and counted, so a wait that times out can say
that someone wrote to the store. Values are text: nothing read from a store is ever unpickled.

Examples:
    >>> import datetime, torch.distributed as dist
    >>> store = dist.HashStore()
    >>> signed = SignedStore(store, b"secret", run_id="run", attempt=0)
    >>> signed.set("failed", "node 1: rank 3 failed")
    >>> signed.get("failed")
    'node 1: rank 3 failed'
    >>> store.set("notebook_launcher/run/0/failed", "forged")
    >>> signed.get("failed") is None, signed.forged
    (True, 1)
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

__all__ = ["SignedStore"]


class SignedStore:
    """Signed text values on a store, under ``notebook_launcher/<run id>/<attempt>/``."""

    def __init__(self, store: Any, secret: bytes, run_id: str, attempt: int) -> None:
        self.store = store
        self._secret = secret
        self._prefix = f"notebook_launcher/{run_id}/{attempt}/"
        self.forged = 0  # values that failed the check

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

    def count(self, key: str) -> int:
        """Add one to the counter ``key`` (an arrival) and return it (counters cannot be signed: a
        forged increment can only make a wait time out, which then says so)."""
        return int(self.store.add(self._prefix + key, 1))

    def _mac(self, key: str, text: str) -> str:
        message = f"{self._prefix}{key}\0{text}".encode()
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()
