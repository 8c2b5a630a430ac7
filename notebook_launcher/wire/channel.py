"""The pipes between the kernel and a rank: event kinds, framing, output lines, the rank's channel.

Each worker process gets three pipes made by the kernel just before it starts: one for events and
the two that become its file descriptors 1 and 2. Anonymous pipes are private to the two processes
that hold them, so no address or secret is needed to keep other processes out, and a pipe keeps order
and never drops data: a writer blocks when the kernel reads slowly rather than losing a line. The
kernel reads all pipes without blocking, so a rank killed mid-frame leaves only a partial frame that
is ignored.

Events are ``(kind, payload, time, rank)`` tuples pickled with the standard pickler; payloads hold
only builtins (result values and exceptions travel as pickled bytes inside them), so decoding a frame
never imports user code. The rank side writes with ``ChannelWriter``; the kernel side reads with
``FrameReader`` and ``lines.LineReader``.

Examples:
    >>> import os
    >>> r, w = os.pipe()
    >>> ChannelWriter(w, rank=0).send(STATUS, "running")
    >>> event = FrameReader().feed(os.read(r, 4096))[0]
    >>> event[:2], event[3]
    (('status', 'running'), 0)
"""

from __future__ import annotations

import logging
import os
import pickle
import signal
import struct
import threading
import time
from typing import Any, Final, Literal

from .lines import LineReader, last_frame

__all__ = [
    "BadFrame",
    "ChannelWriter",
    "FrameReader",
    "LineReader",
    "last_frame",
    "rank_channel",
    "set_rank_channel",
    "EVENT_KINDS",
    "STACKS_SIGNAL",
    "SIGNAL_SENDER_MARK",
]

# The event kinds, rank → kernel.
STATUS: Final = "status"  # payload: a rank status ("running")
RESULT: Final = "result"  # payload: the pickled return value
ERROR: Final = "error"  # payload: an ``error_report`` dict
METRIC: Final = "metric"  # payload: {"step": int, "values": {name: float}}
DISPLAY: Final = "display"  # payload: {"data": mime bundle, "display_id": str | None, "update": bool}
OUTPUT: Final = (
    "output"  # payload: (stream, bytes) a rank's Python streams wrote, or (stream, text) from a torch_xla host
)
STACKS: Final = "stacks"  # payload: {"pid": int, "threads": [{"name": str, "frames": [[file, line, function, code]]}]}
REPLY: Final = (
    "reply"  # payload: {"call": int, "value": pickled bytes} or {"call": int, "error": error_report} (workers)
)
EventKind = Literal["status", "result", "error", "metric", "display", "output", "stacks", "reply"]
EVENT_KINDS = (STATUS, RESULT, ERROR, METRIC, DISPLAY, OUTPUT, STACKS, REPLY)

# The signal by which the kernel asks a rank for its stacks: a real-time signal (no library uses
# them) that a rank blocks in every thread and answers from its output thread (``rank/capture``).
STACKS_SIGNAL = signal.SIGRTMIN + 4 if hasattr(signal, "SIGRTMIN") else signal.SIGUSR2
# How a rank's stderr line naming the sender of a SIGTERM the launcher did not send begins; the
# kernel adds that line to the rank's "killed by signal SIGTERM" failure.
SIGNAL_SENDER_MARK = "[notebook-launcher] "

_HEADER = struct.Struct("<Q")
_PICKLE_START = 0x80  # pickle's PROTO opcode, the first byte of every frame's payload
_MOST = 1 << 40  # bytes: a larger "frame" is bytes that are not one


def _not_a_frame(start: bytes, size: int) -> str:
    return f"bytes that are not an event frame ({size} read), starting {start[:48]!r}"


class ChannelWriter:
    """The rank's end of the event channel; safe to use from several threads.

    ``rank`` tags every event unless ``send`` names another (a worker carrying several ranks, as
    torch_xla's do). ``lock`` replaces the thread lock when processes forked from this one share the
    pipe: a frame must reach the pipe whole.
    """

    def __init__(self, fd: int, rank: int | None = None, lock: Any = None) -> None:
        self._fd = fd
        self.rank = rank
        self._lock = lock or threading.Lock()

    def send(self, kind: EventKind, payload: Any, rank: int | None = None) -> None:
        """Send one event; blocks while the pipe is full, never drops it."""
        rank = self.rank if rank is None else rank
        data = pickle.dumps((kind, payload, time.time(), rank), protocol=pickle.HIGHEST_PROTOCOL)
        frame = memoryview(_HEADER.pack(len(data)) + data)
        with self._lock:
            while frame:
                frame = frame[os.write(self._fd, frame) :]

    def close(self) -> None:
        """Close the pipe; the kernel then sees the end of this worker's events."""
        os.close(self._fd)


class BadFrame:
    """What ``FrameReader`` returns for a frame that could not be decoded (``why`` says what failed)."""

    def __init__(self, why: str) -> None:
        self.why = why

    def __repr__(self) -> str:
        return f"BadFrame({self.why!r})"


class FrameReader:
    """Reassembles events from chunks read off the pipe; a frame that cannot be decoded becomes a
    ``BadFrame`` in its place, so the reader keeps going with the next one.

    Bytes that are not a frame at all (something in the rank wrote to the pipe itself) become one
    ``BadFrame`` saying so, as soon as they are seen, and the reader takes nothing more: where the
    next frame starts can no longer be known.

    Examples:
        >>> FrameReader().feed(b"hello, this is not a frame")
        [BadFrame("bytes that are not an event frame (26 read), starting b'hello, this is not a frame'")]
    """

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._broken = False

    def feed(self, chunk: bytes) -> list[tuple]:
        """Add bytes; return the events completed by them, in order."""
        if self._broken:
            return []
        self._buffer += chunk
        events: list[Any] = []
        while len(self._buffer) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(self._buffer)
            if size > _MOST or (len(self._buffer) > _HEADER.size and self._buffer[_HEADER.size] != _PICKLE_START):
                events.append(BadFrame(_not_a_frame(bytes(self._buffer[:64]), len(self._buffer))))
                self._broken, self._buffer = True, bytearray()
                break
            end = _HEADER.size + size
            if len(self._buffer) < end:
                break
            frame = bytes(self._buffer[_HEADER.size : end])
            del self._buffer[:end]
            try:
                events.append(pickle.loads(frame))
            except BaseException as err:  # even SystemExit from a payload's reduce: the frame is bad, not the reader
                events.append(BadFrame(f"{type(err).__name__}: {err}"))
        return events


# -- the rank's channel ---------------------------------------------------------------------------

_current: ChannelWriter | None = None
METRICS_LOGGER = "trainer_core.metrics"  # where trainer_core logs a record's ``metric`` payload


class _MetricRelay(logging.Handler):
    """Sends the ``metric`` payload of each record of ``METRICS_LOGGER`` on the rank's channel, so
    trainer_core reaches the kernel without importing the launcher."""

    def emit(self, record: logging.LogRecord) -> None:
        payload = getattr(record, "metric", None)
        if payload is not None and _current is not None:
            _current.send(METRIC, payload)


_relay = _MetricRelay()


def set_rank_channel(writer: ChannelWriter | None) -> None:
    """Make ``writer`` this process's channel (called once by the rank bootstrap), and relay
    trainer_core's metric records on it (``METRICS_LOGGER``).

    Examples:
        >>> r, w = os.pipe()
        >>> set_rank_channel(ChannelWriter(w, rank=0))
        >>> logging.getLogger(METRICS_LOGGER).info("metric", extra={"metric": {"step": 0, "values": {"loss": 1.0}}})
        >>> FrameReader().feed(os.read(r, 4096))[0][:2]
        ('metric', {'step': 0, 'values': {'loss': 1.0}})
        >>> set_rank_channel(None)
    """
    global _current
    _current = writer
    logger = logging.getLogger(METRICS_LOGGER)
    if writer is None:
        logger.removeHandler(_relay)
    elif _relay not in logger.handlers:
        logger.setLevel(logging.INFO)
        logger.addHandler(_relay)


def rank_channel() -> ChannelWriter | None:
    """This rank's channel to the kernel, or None outside a launched rank.

    Libraries use it to send events the kernel shows, such as metrics:

    Examples:
        >>> channel = rank_channel()
        >>> if channel is not None:
        ...     channel.send(METRIC, {"values": {"loss": 0.5}, "step": 3})
    """
    return _current
