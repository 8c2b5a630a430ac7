"""Both ends of the pipe between the kernel and a rank: events, framing, output lines, errors.

Each worker process gets three pipes made by the kernel just before it starts: one for events and
the two that become its file descriptors 1 and 2. Anonymous pipes are private to the two processes
that hold them, so no address or secret is needed to keep other processes out, and a pipe keeps order
and never drops data: a writer blocks when the kernel reads slowly rather than losing a line. The
kernel reads all pipes without blocking, so a rank killed mid-frame leaves only a partial frame that
is ignored.

Events are ``(kind, payload, time, rank)`` tuples pickled with the standard pickler; payloads hold
only builtins (result values and exceptions travel as pickled bytes inside them), so decoding a frame
never imports user code. The rank side writes with ``ChannelWriter`` and reports failures with
``error_report``; the kernel side reads with ``FrameReader``/``LineReader`` and turns a report back
into an exception with ``rebuild_exception``.

Example:
    >>> import os
    >>> r, w = os.pipe()
    >>> ChannelWriter(w, rank=0).send(STATUS, "running")
    >>> event = FrameReader().feed(os.read(r, 4096))[0]
    >>> event[:2], event[3]
    (('status', 'running'), 0)
"""

from __future__ import annotations

import codecs
import os
import pickle
import struct
import threading
import time
from typing import Any

from .errors import WorkerError, WorkerTraceback

__all__ = [
    "ChannelWriter",
    "FrameReader",
    "LineReader",
    "rank_channel",
    "set_rank_channel",
    "error_report",
    "rebuild_exception",
    "dumps_for_kernel",
    "EVENT_KINDS",
]

# The event kinds, rank → kernel.
STATUS = "status"  # payload: a rank status ("running")
RESULT = "result"  # payload: the pickled return value
ERROR = "error"  # payload: an ``error_report`` dict
METRIC = "metric"  # payload: {"step": int, "values": {name: float}}
DISPLAY = "display"  # payload: a mime bundle the rank displayed
OUTPUT = "output"  # payload: (stream, text) for ranks that share descriptors (torch_xla threads)
EVENT_KINDS = (STATUS, RESULT, ERROR, METRIC, DISPLAY, OUTPUT)

_HEADER = struct.Struct("<Q")


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

    def send(self, kind: str, payload: Any, rank: int | None = None) -> None:
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


class FrameReader:
    """Reassembles events from chunks read off the pipe."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, chunk: bytes) -> list[tuple]:
        """Add bytes; return the events completed by them, in order."""
        self._buffer += chunk
        events = []
        while len(self._buffer) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(self._buffer)
            end = _HEADER.size + size
            if len(self._buffer) < end:
                break
            events.append(pickle.loads(bytes(self._buffer[_HEADER.size : end])))
            del self._buffer[:end]
        return events


class LineReader:
    """Splits a captured byte stream into text lines (UTF-8, undecodable bytes replaced).

    A carriage return rewrites the current line, as on a terminal: progress bars (tqdm) that redraw
    with ``\\r`` become one line holding their last frame, and ``live`` shows the frame being drawn.

    Example:
        >>> lines = LineReader()
        >>> lines.feed(b"a\\nb"), lines.feed(b"c\\n"), lines.finish()
        (['a\\n'], ['bc\\n'], [])
        >>> lines.feed(b" 10%\\r 50%"), lines.live, lines.feed(b"\\r100%\\n")
        ([], ' 50%', ['100%\\n'])
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._partial = ""

    def feed(self, chunk: bytes) -> list[str]:
        """Add bytes; return the complete lines (each ending in a newline)."""
        text = self._partial + self._decoder.decode(chunk)
        *lines, self._partial = text.split("\n")
        return [last_frame(line) + "\n" for line in lines]

    @property
    def live(self) -> str:
        """The last frame of the line being written (no newline yet), or ""."""
        return last_frame(self._partial)

    def finish(self) -> list[str]:
        """Return what is left after the stream ended, as a last line."""
        rest = last_frame(self._partial + self._decoder.decode(b"", final=True))
        self._partial = ""
        return [rest] if rest else []


def last_frame(line: str) -> str:
    """What a terminal shows of ``line``: the text after its last carriage return.

    Example:
        >>> last_frame(" 10%\\r 50%\\r")
        ' 50%'
    """
    line = line[:-1] if line.endswith("\r") else line
    return line.rsplit("\r", 1)[-1]


# -- results and errors ---------------------------------------------------------------------------


def dumps_for_kernel(value: Any) -> bytes:
    """Pickle ``value`` so the kernel gets back instances of *its own* classes.

    By reference first: under fork a class defined in a notebook cell is the kernel's very class,
    and the standard pickler checks the reference resolves to it. Otherwise (spawn, or classes made
    inside the function) by value with cloudpickle, whose class tracker maps classes the kernel sent
    by value back to the kernel's originals.

    Example:
        >>> pickle.loads(dumps_for_kernel({"loss": 0.5}))
        {'loss': 0.5}
    """
    try:
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        import cloudpickle

        return cloudpickle.dumps(value)


def error_report(exc: BaseException, skip_frame: Any = None) -> dict:
    """A rank's exception as builtins: type name, message, traceback text and (if possible) pickle.

    ``skip_frame`` is a code object whose frame is left out of the traceback (the bootstrap's own).

    Example:
        >>> report = error_report(ValueError("boom"))
        >>> report["type"], report["message"]
        ('ValueError', 'boom')
    """
    import traceback

    tb = exc.__traceback__
    if tb is not None and tb.tb_frame.f_code is skip_frame:
        tb = tb.tb_next
    return {
        "type": type(exc).__qualname__,
        "message": str(exc),
        "traceback": "".join(traceback.format_exception(type(exc), exc, tb)),
        "pickled": _pickle_exception(exc),
    }


def _pickle_exception(exc: BaseException) -> bytes | None:
    """Bytes that load back here, or None (then the kernel shows a ``WorkerError``)."""
    try:
        data = dumps_for_kernel(exc)
        pickle.loads(data)
    except Exception:
        return None
    return data


_NOT_REBUILT = (SystemExit, KeyboardInterrupt, GeneratorExit)


def rebuild_exception(rank: int, report: dict) -> BaseException:
    """Turn a rank's error report into the exception to raise in the kernel.

    Args:
        rank: the global rank that raised.
        report: the dict a rank sends (``type``, ``message``, ``traceback``, ``pickled``).

    Returns:
        The rank's exception as its own type, message prefixed with ``[rank N]`` and the rank's
        traceback as ``__cause__``; a ``WorkerError`` when it cannot be unpickled here or is an exit.

    Example:
        >>> report = {"type": "ValueError", "message": "boom", "traceback": "...",
        ...           "pickled": pickle.dumps(ValueError("boom"))}
        >>> exc = rebuild_exception(1, report)
        >>> type(exc).__name__, str(exc)
        ('ValueError', '[rank 1] boom')
    """
    exc, why = _unpickle(report.get("pickled"))
    if exc is None or isinstance(exc, _NOT_REBUILT):
        why = why or f"{report['type']} is not re-raised in the kernel"
        return WorkerError(
            rank,
            f"rank {rank} raised {report['type']}: {report['message']} ({why})",
            exc_type=report["type"],
            remote_traceback=report["traceback"],
        )
    _name_the_rank(exc, rank)
    exc.__cause__ = WorkerTraceback(report["traceback"])
    exc.__suppress_context__ = True
    return exc


def _unpickle(data: bytes | None) -> tuple[BaseException | None, str | None]:
    if data is None:
        return None, "it could not be pickled in the worker"
    try:
        exc = pickle.loads(data)
    except Exception as err:  # any failure here means "cannot rebuild"; the report still has the text
        return None, f"it could not be rebuilt in the kernel: {type(err).__name__}: {err}"
    if not isinstance(exc, BaseException):
        return None, "the report held no exception"
    return exc, None


def _name_the_rank(exc: BaseException, rank: int) -> None:
    """Prefix the message with the rank when the message is the first argument; else add a note."""
    prefix = f"[rank {rank}] "
    args = exc.args
    if args and isinstance(args[0], str) and str(exc) == args[0]:
        exc.args = (prefix + args[0], *tuple(args[1:]))
        if str(exc).startswith(prefix):
            return
        exc.args = args
    if hasattr(exc, "add_note"):
        exc.add_note(f"raised on rank {rank}")


# -- the rank's channel ---------------------------------------------------------------------------

_current: ChannelWriter | None = None


def set_rank_channel(writer: ChannelWriter | None) -> None:
    """Make ``writer`` this process's channel (called once by the rank bootstrap)."""
    global _current
    _current = writer


def rank_channel() -> ChannelWriter | None:
    """This rank's channel to the kernel, or None outside a launched rank.

    Libraries use it to send events the kernel shows, such as metrics:

    Example:
        >>> channel = rank_channel()
        >>> if channel is not None:
        ...     channel.send(METRIC, {"values": {"loss": 0.5}, "step": 3})
    """
    return _current
