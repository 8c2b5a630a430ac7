"""Challenges that prove a store's host is of this launch, now: a joining node writes a random
challenge, and goes on only once the host has signed the answer in the session the store's marker
names, bound to the store's port.

A marker (and every signed value) can be copied from one launch's store to another's when both
were given the same secret. Only the host of the store a node reached knows the session it drew,
so a copied marker names a session whose host is not there to answer; an answer relayed from the
other launch's host names the other store's port. Either way the node's wait ends with an error
that says the marker may have been replayed.

Examples:
    >>> import torch.distributed as dist
    >>> from notebook_launcher.backends.local.signed_store import SignedStore
    >>> store = SignedStore(dist.HashStore(), b"secret", "run", 0, session="s1")
    >>> store.put_raw("challenge/1", "c0ffee")
    >>> answer_all(store, ["1"], port=29400)
    >>> store.get("answer/1") == answer("c0ffee", 29400)
    True
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ...errors import LaunchError
from .signed_store import SignedStore

__all__ = ["Wait", "answer", "answer_all", "await_answer", "forgeries"]

_POLL = 0.1  # seconds between looks at the store while waiting


@dataclass(frozen=True)
class Wait:
    """How a node waits in a rendezvous: until ``deadline`` (``timeout`` seconds after it began),
    stopping when ``stop_requested()``, saying what it waits for with ``waiting(text)``."""

    deadline: float
    timeout: float
    stop_requested: Callable[[], bool]
    waiting: Callable[[str], None]


def answer(challenge: str, port: int) -> str:
    """What a store's host signs for ``challenge`` on the store at ``port``."""
    return f"{challenge} port {port}"


def answer_all(signed: SignedStore, names: Iterable[str], port: int) -> None:
    """Sign, in ``signed``'s session, the answer to each challenge under ``names`` not answered yet."""
    for name in names:
        challenge = signed.raw(f"challenge/{name}")
        if challenge is not None and signed.get(f"answer/{name}") != answer(challenge, port):
            signed.set(f"answer/{name}", answer(challenge, port))


def await_answer(
    signed: SignedStore, name: str, port: int, who: str, whom: str, wait: Wait, tend: Callable[[], None]
) -> None:
    """Challenge the host of the store at ``port`` (as ``name``) and wait for its answer, calling
    ``tend()`` between looks (a node may have challenges of its own to answer meanwhile).

    Raises:
        LaunchError: stopped, or no answer before the deadline.
    """
    challenge = secrets.token_hex(16)
    signed.put_raw(f"challenge/{name}", challenge)
    while signed.get(f"answer/{name}") != answer(challenge, port):
        if wait.stop_requested():
            raise LaunchError(f"stopped while waiting for {whom} to answer {who}'s challenge")
        if time.monotonic() > wait.deadline:
            raise LaunchError(
                f"{whom} did not answer {who}'s challenge on the store at port {port} within"
                f" rendezvous_timeout={wait.timeout:g} s: the store's marker may have been replayed from"
                " another launch (one given the same secret)" + forgeries(signed)
            )
        tend()
        wait.waiting(f"waiting for {whom} (port {port}) to answer")
        time.sleep(_POLL)  # a poll of a store that may be on another machine, bounded by the deadline


def forgeries(signed: SignedStore) -> str:
    """A sentence to add to a timeout's message when values on the store failed their check."""
    if not signed.forged:
        return ""
    return (
        f"; {signed.forged} value(s) on the store were not signed with this launch's secret: give every"
        " node the same secret= (or another process wrote to the store)"
    )
