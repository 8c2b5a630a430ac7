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
``FrameReader``/``LineReader``.

Examples:
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
STATUS = "status"  # payload: a rank status ("running")
RESULT = "result"  # payload: the pickled return value
ERROR = "error"  # payload: an ``error_report`` dict
METRIC = "metric"  # payload: {"step": int, "values": {name: float}}
DISPLAY = "display"  # payload: {"data": mime bundle, "display_id": str | None, "update": bool}
OUTPUT = "output"  # payload: (stream, text) for ranks that share descriptors (torch_xla threads)
STACKS = "stacks"  # payload: {"pid": int, "threads": [{"name": str, "frames": [[file, line, function, code]]}]}
REPLY = "reply"  # payload: {"call": int, "value": pickled bytes} or {"call": int, "error": error_report} (workers)
EVENT_KINDS = (STATUS, RESULT, ERROR, METRIC, DISPLAY, OUTPUT, STACKS, REPLY)

# The signal by which the kernel asks a rank for its stacks: a real-time signal (no library uses
# them) that a rank blocks in every thread and answers from its output thread (``rank/capture``).
STACKS_SIGNAL = signal.SIGRTMIN + 4 if hasattr(signal, "SIGRTMIN") else signal.SIGUSR2
# How a rank's stderr line naming the sender of a SIGTERM the launcher did not send begins; the
# kernel adds that line to the rank's "killed by signal SIGTERM" failure.
SIGNAL_SENDER_MARK = "[notebook-launcher] "

_HEADER = struct.Struct("<Q")
LIVE_LIMIT = 4096  # characters of a line still being written that the live preview shows (its end)


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


class BadFrame:
    """What ``FrameReader`` returns for a frame that could not be decoded (``why`` says what failed)."""

    def __init__(self, why: str) -> None:
        self.why = why

    def __repr__(self) -> str:
        return f"BadFrame({self.why!r})"


class FrameReader:
    """Reassembles events from chunks read off the pipe; a frame that cannot be decoded becomes a
    ``BadFrame`` in its place, so the reader keeps going with the next one."""

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
            frame = bytes(self._buffer[_HEADER.size : end])
            del self._buffer[:end]
            try:
                events.append(pickle.loads(frame))
            except BaseException as err:  # even SystemExit from a payload's reduce: the frame is bad, not the reader
                events.append(BadFrame(f"{type(err).__name__}: {err}"))
        return events


class LineReader:
    """Splits a captured byte stream into text lines (UTF-8, undecodable bytes replaced).

    ``feed`` returns the complete lines a chunk finished, as one string (each line ending with a
    newline): splitting into single lines is left to whoever needs them, so a rank printing
    hundreds of thousands of lines a second costs the kernel a few string operations per read.
    A carriage return rewrites the current line, as on a terminal: progress bars (tqdm) that redraw
    with ``\\r`` become one line holding their last frame, and ``live`` shows the frame being drawn.

    Examples:
        >>> lines = LineReader()
        >>> lines.feed(b"a\\nb"), lines.feed(b"c\\nd\\n"), lines.finish()
        ('a\\n', 'bc\\nd\\n', '')
        >>> lines.feed(b" 10%\\r 50%"), lines.live, lines.feed(b"\\r100%\\n")
        ('', ' 50%', '100%\\n')
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._partial: list[str] = []  # the line being written, in the pieces it came in

    def feed(self, chunk: bytes) -> str:
        """Add bytes; return the lines they completed ("" when none).

        Each byte is looked at once: a long line without a newline (megabytes of it) is kept in
        pieces and joined once, when its newline comes.
        """
        new = self._decoder.decode(chunk)
        cut = new.rfind("\n") + 1
        if not cut:
            if new:
                self._partial.append(new)
            return ""
        complete = "".join(self._partial) + new[:cut] if self._partial else new[:cut]
        self._partial = [new[cut:]] if cut < len(new) else []
        if "\r" in complete:
            complete = "".join(last_frame(line) + "\n" for line in complete.split("\n")[:-1])
        return complete

    @property
    def live(self) -> str:
        """The last frame of the line being written (no newline yet), or "": its last ``LIVE_LIMIT``
        characters, found from the end, so a preview costs the same however long the line is."""
        parts: list[str] = []
        size = 0
        for piece in reversed(self._partial):
            parts.append(piece)
            size += len(piece)
            body = piece[:-1] if len(parts) == 1 and piece.endswith("\r") else piece
            if "\r" in body or size >= LIVE_LIMIT:
                break
        return last_frame("".join(reversed(parts)))[-LIVE_LIMIT:]

    def finish(self) -> str:
        """What is left after the stream ended, as a last line ("" when nothing is)."""
        rest = last_frame("".join(self._partial) + self._decoder.decode(b"", final=True))
        self._partial = []
        return rest + "\n" if rest else ""


def last_frame(line: str) -> str:
    """What a terminal shows of ``line``: the text after its last carriage return.

    Examples:
        >>> last_frame(" 10%\\r 50%\\r")
        ' 50%'
    """
    line = line[:-1] if line.endswith("\r") else line
    return line.rsplit("\r", 1)[-1]


# -- the rank's channel ---------------------------------------------------------------------------

_current: ChannelWriter | None = None


def set_rank_channel(writer: ChannelWriter | None) -> None:
    """Make ``writer`` this process's channel (called once by the rank bootstrap)."""
    global _current
    _current = writer


def rank_channel() -> ChannelWriter | None:
    """This rank's channel to the kernel, or None outside a launched rank.

    Libraries use it to send events the kernel shows, such as metrics:

    Examples:
        >>> channel = rank_channel()
        >>> if channel is not None:
        ...     channel.send(METRIC, {"values": {"loss": 0.5}, "step": 3})
    """
    return _current
