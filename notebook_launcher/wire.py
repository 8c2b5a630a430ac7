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
import signal
import struct
import threading
import time
from typing import Any

from .errors import WorkerError, WorkerTraceback
from .tracebacks import frames_of, traceback_from

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
DISPLAY = "display"  # payload: {"data": mime bundle, "display_id": str | None, "update": bool}
OUTPUT = "output"  # payload: (stream, text) for ranks that share descriptors (torch_xla threads)
STACKS = "stacks"  # payload: {"pid": int, "threads": [{"name": str, "frames": [[file, line, function, code]]}]}
EVENT_KINDS = (STATUS, RESULT, ERROR, METRIC, DISPLAY, OUTPUT, STACKS)

# The signal by which the kernel asks a rank for its stacks: a real-time signal (no library uses
# them) that a rank blocks in every thread and answers from its output thread (``rank/capture``).
STACKS_SIGNAL = signal.SIGRTMIN + 4 if hasattr(signal, "SIGRTMIN") else signal.SIGUSR2

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

    ``feed`` returns the complete lines a chunk finished, as one string (each line ending with a
    newline): splitting into single lines is left to whoever needs them, so a rank printing
    hundreds of thousands of lines a second costs the kernel a few string operations per read.
    A carriage return rewrites the current line, as on a terminal: progress bars (tqdm) that redraw
    with ``\\r`` become one line holding their last frame, and ``live`` shows the frame being drawn.

    Example:
        >>> lines = LineReader()
        >>> lines.feed(b"a\\nb"), lines.feed(b"c\\nd\\n"), lines.finish()
        ('a\\n', 'bc\\nd\\n', '')
        >>> lines.feed(b" 10%\\r 50%"), lines.live, lines.feed(b"\\r100%\\n")
        ('', ' 50%', '100%\\n')
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._partial = ""

    def feed(self, chunk: bytes) -> str:
        """Add bytes; return the lines they completed ("" when none)."""
        text = self._partial + self._decoder.decode(chunk)
        cut = text.rfind("\n") + 1
        complete, self._partial = text[:cut], text[cut:]
        if "\r" in complete:
            complete = "".join(last_frame(line) + "\n" for line in complete.split("\n")[:-1])
        return complete

    @property
    def live(self) -> str:
        """The last frame of the line being written (no newline yet), or ""."""
        return last_frame(self._partial)

    def finish(self) -> str:
        """What is left after the stream ended, as a last line ("" when nothing is)."""
        rest = last_frame(self._partial + self._decoder.decode(b"", final=True))
        self._partial = ""
        return rest + "\n" if rest else ""


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


def error_report(exc: BaseException, skip_frame: Any = None, depth: int = 0) -> dict:
    """A rank's exception as builtins, for the kernel to rebuild (``rebuild_exception``).

    It carries the type's name, the message, the traceback as text and as frames (as
    builtins, so the kernel can raise the exception with the rank's own frames: ``tracebacks``), the
    pickled exception, its parts (class, args, attributes: for classes whose ``__init__`` does not
    take their ``args``) and, up to three levels, the exception it was raised from.
    ``skip_frame`` is a code object whose frame is left out (the bootstrap's own).

    Example:
        >>> report = error_report(ValueError("boom"))
        >>> report["type"], report["message"]
        ('ValueError', 'boom')
    """
    import traceback

    tb = exc.__traceback__
    if tb is not None and tb.tb_frame.f_code is skip_frame:
        tb = tb.tb_next
    chained, kind = _chained(exc)
    return {
        "type": type(exc).__qualname__,
        "message": _message(exc),
        "text": "".join(traceback.format_exception(type(exc), exc, tb, chain=False)),
        "frames": frames_of(tb),
        "pickled": _pickle_exception(exc),
        "parts": _exception_parts(exc),
        "chained": error_report(chained, depth=depth + 1) if chained is not None and depth < 3 else None,
        "chain_kind": kind,
    }


def _message(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception as err:  # a broken __str__ must not lose the report
        return f"<str() failed: {type(err).__name__}>"


def _chained(exc: BaseException) -> tuple[BaseException | None, str | None]:
    if exc.__cause__ is not None:
        return exc.__cause__, "cause"
    if exc.__context__ is not None and not exc.__suppress_context__:
        return exc.__context__, "context"
    return None, None


def _pickle_exception(exc: BaseException) -> bytes | None:
    """Bytes that load back here, or None."""
    try:
        data = dumps_for_kernel(exc)
        pickle.loads(data)
    except Exception:
        return None
    return data


def _exception_parts(exc: BaseException) -> dict | None:
    """Class, args and attributes, pickled one by one (attributes that cannot be pickled are left out)."""
    try:
        state = {}
        for name, value in vars(exc).items():
            try:
                state[name] = dumps_for_kernel(value)
            except Exception:
                continue
        return {"cls": dumps_for_kernel(type(exc)), "args": dumps_for_kernel(exc.args), "state": state}
    except Exception:
        return None


_NOT_REBUILT = (SystemExit, KeyboardInterrupt, GeneratorExit)


def rebuild_exception(rank: int, report: dict) -> BaseException:
    """Turn a rank's error report into the exception to raise in the kernel.

    The exception comes back as its own type, even when its ``__init__`` takes other arguments than
    its ``args`` (it is then made without calling ``__init__``: args, attributes and notes restored),
    with its message prefixed by ``[rank N]`` and the rank's frames as its traceback, so IPython
    shows them like a local error. A ``WorkerError`` (with the same traceback) only when the class
    cannot be loaded in the kernel, or for exits and interrupts.

    Args:
        rank: the global rank that raised.
        report: the dict a rank sends (``error_report``).

    Example:
        >>> report = error_report(ValueError("boom"))
        >>> exc = rebuild_exception(1, report)
        >>> type(exc).__name__, str(exc)
        ('ValueError', '[rank 1] boom')
    """
    exc = _rebuild(rank, report)
    _name_the_rank(exc, rank)
    return exc


def _rebuild(rank: int, report: dict) -> BaseException:
    tb = traceback_from(report.get("frames") or [])
    exc, why = _unpickle(report.get("pickled"))
    if exc is None:
        exc, why = _from_parts(report.get("parts"), why)
    if exc is None or isinstance(exc, _NOT_REBUILT):
        why = why or f"{report['type']} is not re-raised in the kernel"
        error = WorkerError(
            rank,
            f"rank {rank} raised {report['type']}: {report['message']} ({why})",
            exc_type=report["type"],
            remote_traceback=report["text"],
        )
        return error.with_traceback(tb)
    chained = report.get("chained")
    if chained is not None:
        earlier = _rebuild(rank, chained)
        if report.get("chain_kind") == "cause":
            exc.__cause__ = earlier
        else:
            exc.__context__ = earlier
    elif tb is None and report.get("text"):
        exc.__cause__ = WorkerTraceback(report["text"])  # no frames: show the rank's traceback as text
    exc.__suppress_context__ = report.get("chain_kind") == "cause" or exc.__cause__ is not None
    return exc.with_traceback(tb)


def _unpickle(data: bytes | None) -> tuple[BaseException | None, str | None]:
    if data is None:
        return None, "it could not be pickled in the rank"
    try:
        exc = pickle.loads(data)
    except Exception as err:  # any failure here means "cannot rebuild"; the report still has the text
        return None, f"it could not be unpickled in the kernel: {type(err).__name__}: {err}"
    if not isinstance(exc, BaseException):
        return None, "the report held no exception"
    return exc, None


def _from_parts(parts: dict | None, why: str | None) -> tuple[BaseException | None, str | None]:
    """Make the exception without calling ``__init__``: class, then args and attributes."""
    if parts is None:
        return None, why
    try:
        cls = pickle.loads(parts["cls"])
    except Exception as err:
        return None, f"its class could not be loaded in the kernel: {type(err).__name__}: {err}"
    if not (isinstance(cls, type) and issubclass(cls, BaseException)):
        return None, "the report held no exception class"
    try:
        exc = cls.__new__(cls)
        exc.args = pickle.loads(parts["args"])
        for name, data in parts["state"].items():
            try:
                setattr(exc, name, pickle.loads(data))
            except Exception:
                continue
    except Exception as err:
        return None, f"it could not be rebuilt in the kernel: {type(err).__name__}: {err}"
    return exc, None


def _name_the_rank(exc: BaseException, rank: int) -> None:
    """Prefix the message with the rank when the message is the first argument; else add a note."""
    if isinstance(exc, WorkerError):
        return
    prefix = f"[rank {rank}] "
    args = exc.args
    try:
        if args and isinstance(args[0], str) and str(exc) == args[0]:
            exc.args = (prefix + args[0], *args[1:])
            if str(exc).startswith(prefix):
                return
            exc.args = args
    except Exception:  # a __str__ that fails on the changed args: fall back to a note
        exc.args = args
    if hasattr(exc, "add_note") and f"raised on rank {rank}" not in getattr(exc, "__notes__", ()):
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
