"""What a rank sends, as typed events the kernel can act on: ``decode_event`` checks a raw frame.

On the pipe an event is a ``(kind, payload, time, rank)`` tuple of builtins (``channel``). A rank
runs the user's code, and that code can write anything to its channel (or break the channel's
pickles), so the kernel never acts on a raw tuple: ``decode_event`` turns it into one of the frozen
dataclasses below, or into ``Malformed`` saying what is wrong, which the supervisor makes that
rank's own failure instead of a fault of the launcher. Values that travel pickled (results,
replies) are checked where they are unpickled.

Examples:
    >>> decode_event(("metric", {"step": 3, "values": {"loss": 0.5}}, 1.5, 0), [0])
    Metric(rank=0, time=1.5, values={'loss': 0.5}, step=3)
    >>> decode_event(("display", {"data": {"text/plain": "hi"}}, 1.5, 0), [0]).why
    "a 'display' event of the wrong shape (a display payload needs the keys 'data', 'display_id', 'update')"
"""

from __future__ import annotations

import time as _time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from numbers import Number
from typing import Any, ClassVar

from ..choices import RANK_STATUSES, RankStatus
from .channel import DISPLAY, ERROR, METRIC, OUTPUT, REPLY, RESULT, STACKS, STATUS, BadFrame, EventKind

__all__ = [
    "Display",
    "Event",
    "Failure",
    "Malformed",
    "Metric",
    "Output",
    "Reply",
    "Result",
    "Stacks",
    "Status",
    "decode_event",
    "output_parts",
]


@dataclass(frozen=True)
class Status:
    """The rank's status changed (``running``, ...)."""

    kind: ClassVar[EventKind] = STATUS
    rank: int
    time: float
    status: RankStatus


@dataclass(frozen=True)
class Output:
    """Text a rank wrote to ``sys.stdout``/``sys.stderr`` (sent as bytes, in the order written), or a
    torch_xla host's lines for one of its ranks (sent as text)."""

    kind: ClassVar[EventKind] = OUTPUT
    rank: int
    time: float
    stream: str
    text: str


@dataclass(frozen=True)
class Metric:
    """Numbers the rank logged (``Accelerator.log``, ``log_metric``), at an optional step."""

    kind: ClassVar[EventKind] = METRIC
    rank: int
    time: float
    values: Mapping[str, float]
    step: int | None

    def as_dict(self) -> dict:
        """The metric as the record and the views keep it: ``{"step": ..., "values": {...}}``."""
        return {"step": self.step, "values": dict(self.values)}


@dataclass(frozen=True)
class Display:
    """A rich output (``display(...)``, a figure) the rank showed or updated."""

    kind: ClassVar[EventKind] = DISPLAY
    rank: int
    time: float
    data: Mapping[str, Any]
    display_id: str | None
    update: bool


@dataclass(frozen=True)
class Result:
    """The rank's return value, pickled (unpickled by the controller, where a bad pickle is caught)."""

    kind: ClassVar[EventKind] = RESULT
    rank: int
    time: float
    pickled: bytes


@dataclass(frozen=True)
class Failure:
    """The rank's exception, as an ``error_report`` dict (``reports.rebuild_exception`` reads it)."""

    kind: ClassVar[EventKind] = ERROR
    rank: int
    time: float
    report: Mapping[str, Any]


@dataclass(frozen=True)
class Stacks:
    """Every thread's stack in the rank, as asked for by ``STACKS_SIGNAL``."""

    kind: ClassVar[EventKind] = STACKS
    rank: int
    time: float
    report: Mapping[str, Any]


@dataclass(frozen=True)
class Reply:
    """A persistent worker's answer to one call (``{"call": id, "value"|"error": ...}``)."""

    kind: ClassVar[EventKind] = REPLY
    rank: int
    time: float
    payload: Mapping[str, Any]


@dataclass(frozen=True)
class Malformed:
    """A frame that is no event the kernel knows; ``why`` says what is wrong with it."""

    rank: int
    why: str


Event = Status | Output | Metric | Display | Result | Failure | Stacks | Reply


def decode_event(raw: Any, ranks: list[int]) -> Event | Malformed:
    """The typed event of a raw frame from a worker running ``ranks`` (an event naming no rank is
    its first rank's), or ``Malformed`` saying what is wrong with it; never raises.

    Examples:
        >>> decode_event(("status", "running", 1.5, None), [3])
        Status(rank=3, time=1.5, status='running')
        >>> decode_event(("bogus", 1, 1.5, 3), [3]).why
        "an event of unknown kind 'bogus'"
    """
    if isinstance(raw, BadFrame):
        return Malformed(ranks[0], f"an event the kernel could not decode ({raw.why})")
    if not isinstance(raw, tuple) or len(raw) != 4:
        return Malformed(ranks[0], f"a malformed event ({type(raw).__name__})")
    kind, payload, when, rank = raw
    build = _BUILDERS.get(kind) if isinstance(kind, str) else None
    if build is None:
        return Malformed(ranks[0], f"an event of unknown kind {kind!r:.80}")
    rank = ranks[0] if rank is None else rank
    if isinstance(rank, bool) or not isinstance(rank, int) or rank not in ranks:
        return Malformed(ranks[0], f"a {kind!r} event for rank {rank!r:.40}, which it does not run")
    if isinstance(when, bool) or not isinstance(when, (int, float)):
        when = _time.time()
    try:
        return build(rank, float(when), payload)
    except ValueError as err:
        return Malformed(rank, f"a {kind!r} event of the wrong shape ({err})")


def _status(rank: int, when: float, payload: Any) -> Status:
    if payload not in RANK_STATUSES:
        raise ValueError(f"a status must be one of {', '.join(RANK_STATUSES)}, got {payload!r:.80}")
    return Status(rank, when, payload)


def output_parts(payload: Any) -> tuple[str, bytes | str] | None:
    """``(stream, data)`` of a well-formed output payload, else None: bytes from a rank's streams
    (``rank.ordered_output``), text from a torch_xla host. The kernel's pipe reader takes these
    before decoding (a character may be split between two events).

    Examples:
        >>> output_parts(("stderr", b"x\\n")), output_parts(("stdin", "x"))
        (('stderr', b'x\\n'), None)
    """
    if not (type(payload) is tuple and len(payload) == 2 and payload[0] in ("stdout", "stderr")):
        return None
    return payload if type(payload[1]) in (bytes, str) else None


def _output(rank: int, when: float, payload: Any) -> Output:
    parts = output_parts(payload)
    if parts is None:
        raise ValueError("an output payload is (stream, data) with stream 'stdout' or 'stderr' and bytes or text")
    stream, data = parts
    return Output(rank, when, stream, data.decode("utf-8", "replace") if isinstance(data, bytes) else data)


def _metric(rank: int, when: float, payload: Any) -> Metric:
    _keys(payload, "metric", ("values",))
    values = payload["values"]
    if not isinstance(values, dict) or not all(
        isinstance(name, str) and isinstance(value, Number) for name, value in values.items()
    ):
        raise ValueError("metric values must be a dict of names to numbers")
    step = payload.get("step")
    if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
        raise ValueError(f"a metric's step must be an int, got {type(step).__name__}")
    return Metric(rank, when, values, step)


def _display(rank: int, when: float, payload: Any) -> Display:
    _keys(payload, "display", ("data", "display_id", "update"))
    data = payload["data"]
    if not isinstance(data, dict) or not data or not all(isinstance(mime, str) for mime in data):
        raise ValueError("a display's data must be a mime bundle (a dict of mime types to content)")
    display_id = payload["display_id"]
    if display_id is not None and not isinstance(display_id, str):
        raise ValueError(f"a display_id must be a str or None, got {type(display_id).__name__}")
    return Display(rank, when, data, display_id, bool(payload["update"]))


def _result(rank: int, when: float, payload: Any) -> Result:
    if not isinstance(payload, (bytes, bytearray)):
        raise ValueError(f"a result is sent as pickled bytes, got {type(payload).__name__}")
    return Result(rank, when, bytes(payload))


def _failure(rank: int, when: float, payload: Any) -> Failure:
    _keys(payload, "error", ("type", "message", "text"))
    if not all(isinstance(payload[key], str) for key in ("type", "message", "text")):
        raise ValueError("an error report's type, message and text must be str")
    return Failure(rank, when, payload)


def _stacks(rank: int, when: float, payload: Any) -> Stacks:
    _keys(payload, "stacks", ("pid", "threads"))
    if not isinstance(payload["threads"], list):
        raise ValueError("stacks' threads must be a list")
    return Stacks(rank, when, payload)


def _reply(rank: int, when: float, payload: Any) -> Reply:
    _keys(payload, "reply", ("call",))
    return Reply(rank, when, payload)


def _keys(payload: Any, kind: str, keys: tuple[str, ...]) -> None:
    if not isinstance(payload, dict) or not all(key in payload for key in keys):
        raise ValueError(f"a {kind} payload needs the keys {', '.join(map(repr, keys))}")


_BUILDERS: dict[str, Callable[[int, float, Any], Event]] = {
    STATUS: _status,
    OUTPUT: _output,
    METRIC: _metric,
    DISPLAY: _display,
    RESULT: _result,
    ERROR: _failure,
    STACKS: _stacks,
    REPLY: _reply,
}
