"""The shape of each event and its payload, checked in the kernel before anything acts on it.

A rank runs the user's code, and that code can write anything to its channel (or break the
channel's pickles). The kernel's supervisor must survive whatever arrives: ``check_payload``
raises ``ValueError`` saying what is wrong, and the supervisor turns that into the rank's own
failure instead of a fault of the launcher. Values that travel pickled (results, replies) are
checked where they are unpickled.

Examples:
    >>> check_payload("metric", {"step": 3, "values": {"loss": 0.5}})
    >>> check_payload("display", {"data": {"text/plain": "hi"}})
    Traceback (most recent call last):
    ...
    ValueError: a display payload needs the keys 'data', 'display_id', 'update'
"""

from __future__ import annotations

import time
from collections.abc import Callable
from numbers import Number
from typing import Any

from ..choices import RANK_STATUSES
from .channel import DISPLAY, ERROR, EVENT_KINDS, METRIC, OUTPUT, REPLY, RESULT, STACKS, STATUS, BadFrame

__all__ = ["check_payload", "event_parts"]


def event_parts(event: Any, ranks: list[int]) -> tuple[str, Any, float, int] | str:
    """``(kind, payload, time, rank)`` of a well-formed event from a worker running ``ranks`` (an
    event naming no rank is its first rank's), or a description of what is wrong with it.

    Examples:
        >>> event_parts(("status", "running", 1.5, None), [3])
        ('status', 'running', 1.5, 3)
        >>> event_parts(("bogus", 1, 1.5, 3), [3])
        "an event of unknown kind 'bogus'"
    """
    if isinstance(event, BadFrame):
        return f"an event the kernel could not decode ({event.why})"
    if not isinstance(event, tuple) or len(event) != 4:
        return f"a malformed event ({type(event).__name__})"
    kind, payload, when, rank = event
    if kind not in EVENT_KINDS:
        return f"an event of unknown kind {kind!r}"
    rank = ranks[0] if rank is None else rank
    if rank not in ranks:
        return f"a {kind!r} event for rank {rank!r}, which it does not run"
    if isinstance(when, bool) or not isinstance(when, (int, float)):
        when = time.time()
    return kind, payload, float(when), rank


def check_payload(kind: str, payload: Any) -> None:
    """Raise ``ValueError`` when ``payload`` is not what an event of ``kind`` carries."""
    _CHECKS[kind](payload)


def _status(payload: Any) -> None:
    if payload not in RANK_STATUSES:
        raise ValueError(f"a status must be one of {', '.join(RANK_STATUSES)}, got {payload!r:.80}")


def _output(payload: Any) -> None:
    if not (isinstance(payload, tuple) and len(payload) == 2 and payload[0] in ("stdout", "stderr")):
        raise ValueError("an output payload is (stream, text) with stream 'stdout' or 'stderr'")
    if not isinstance(payload[1], str):
        raise ValueError(f"output text must be a str, got {type(payload[1]).__name__}")


def _metric(payload: Any) -> None:
    _keys(payload, "metric", ("values",))
    values = payload["values"]
    if not isinstance(values, dict) or not all(
        isinstance(name, str) and isinstance(value, Number) for name, value in values.items()
    ):
        raise ValueError("metric values must be a dict of names to numbers")
    step = payload.get("step")
    if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
        raise ValueError(f"a metric's step must be an int, got {type(step).__name__}")


def _display(payload: Any) -> None:
    _keys(payload, "display", ("data", "display_id", "update"))
    data = payload["data"]
    if not isinstance(data, dict) or not data or not all(isinstance(mime, str) for mime in data):
        raise ValueError("a display's data must be a mime bundle (a dict of mime types to content)")
    if payload["display_id"] is not None and not isinstance(payload["display_id"], str):
        raise ValueError(f"a display_id must be a str or None, got {type(payload['display_id']).__name__}")


def _pickled(payload: Any) -> None:
    if not isinstance(payload, (bytes, bytearray)):
        raise ValueError(f"a result is sent as pickled bytes, got {type(payload).__name__}")


def _error(payload: Any) -> None:
    _keys(payload, "error", ("type", "message", "text"))
    if not all(isinstance(payload[key], str) for key in ("type", "message", "text")):
        raise ValueError("an error report's type, message and text must be str")


def _stacks(payload: Any) -> None:
    _keys(payload, "stacks", ("pid", "threads"))
    if not isinstance(payload["threads"], list):
        raise ValueError("stacks' threads must be a list")


def _reply(payload: Any) -> None:
    _keys(payload, "reply", ("call",))


def _keys(payload: Any, kind: str, keys: tuple[str, ...]) -> None:
    if not isinstance(payload, dict) or not all(key in payload for key in keys):
        raise ValueError(f"a {kind} payload needs the keys {', '.join(map(repr, keys))}")


_CHECKS: dict[str, Callable[[Any], None]] = {
    STATUS: _status,
    OUTPUT: _output,
    METRIC: _metric,
    DISPLAY: _display,
    RESULT: _pickled,
    ERROR: _error,
    STACKS: _stacks,
    REPLY: _reply,
}
