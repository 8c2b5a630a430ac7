"""The worker → kernel channel: framed events over a pipe, and line splitting of captured output.

Each worker gets three pipes made by the kernel just before it starts: one for events and the two
that become its file descriptors 1 and 2. Anonymous pipes are private to the two processes that hold
them, so no address or secret is needed to keep other processes out, and a pipe keeps order and never
drops data: a writer blocks when the kernel reads slowly rather than losing a line. The kernel reads
all pipes without blocking, so a worker killed mid-frame leaves only a partial frame that is ignored.

Events are ``(kind, payload, time, rank)`` tuples pickled with the standard pickler; payloads hold only
builtins (result values and exceptions travel as cloudpickle bytes inside them), so decoding a frame
never imports user code.

Example:
    >>> import os
    >>> r, w = os.pipe()
    >>> ChannelWriter(w, rank=0).send("status", "running")
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

__all__ = ["ChannelWriter", "FrameReader", "LineReader", "worker_channel", "set_worker_channel"]

_HEADER = struct.Struct("<Q")

STATUS, RESULT, ERROR, METRIC, DISPLAY, OUTPUT = "status", "result", "error", "metric", "display", "output"


class ChannelWriter:
    """The worker's end of the event channel; safe to use from several threads.

    ``rank`` tags every event unless ``send`` names another (a worker carrying several ranks, as
    torch_xla's do). ``lock`` replaces the thread lock when processes forked from this one share the
    pipe: a frame must reach the pipe whole.
    """

    def __init__(self, fd, rank=None, lock=None):
        self._fd = fd
        self.rank = rank
        self._lock = lock or threading.Lock()

    def send(self, kind, payload, rank=None):
        """Send one event; blocks while the pipe is full, never drops it."""
        rank = self.rank if rank is None else rank
        data = pickle.dumps((kind, payload, time.time(), rank), protocol=pickle.HIGHEST_PROTOCOL)
        frame = memoryview(_HEADER.pack(len(data)) + data)
        with self._lock:
            while frame:
                frame = frame[os.write(self._fd, frame):]

    def close(self):
        """Close the pipe; the kernel then sees the end of this worker's events."""
        os.close(self._fd)


class FrameReader:
    """Reassembles events from chunks read off the pipe."""

    def __init__(self):
        self._buffer = bytearray()

    def feed(self, chunk):
        """Add bytes; return the events completed by them, in order."""
        self._buffer += chunk
        events = []
        while len(self._buffer) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(self._buffer)
            end = _HEADER.size + size
            if len(self._buffer) < end:
                break
            events.append(pickle.loads(bytes(self._buffer[_HEADER.size:end])))
            del self._buffer[:end]
        return events


class LineReader:
    """Splits a captured byte stream into text lines (UTF-8, undecodable bytes replaced).

    A carriage return rewrites the current line, as on a terminal: progress bars (tqdm) that redraw
    with ``\r`` become one line holding their last frame, and ``live`` shows the frame being drawn.

    Example:
        >>> lines = LineReader()
        >>> lines.feed(b"a\nb"), lines.feed(b"c\n"), lines.finish()
        (['a\n'], ['bc\n'], [])
        >>> lines.feed(b" 10%\r 50%"), lines.live, lines.feed(b"\r100%\n")
        ([], ' 50%', ['100%\n'])
    """

    def __init__(self):
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._partial = ""

    def feed(self, chunk):
        """Add bytes; return the complete lines (each ending in a newline)."""
        text = self._partial + self._decoder.decode(chunk)
        *lines, self._partial = text.split("\n")
        return [_last_frame(line) + "\n" for line in lines]

    @property
    def live(self):
        """The last frame of the line being written (no newline yet), or ""."""
        return _last_frame(self._partial)

    def finish(self):
        """Return what is left after the stream ended, as a last line."""
        rest = _last_frame(self._partial + self._decoder.decode(b"", final=True))
        self._partial = ""
        return [rest] if rest else []


def _last_frame(line):
    line = line[:-1] if line.endswith("\r") else line
    return line.rsplit("\r", 1)[-1]


_current = None


def set_worker_channel(writer):
    """Make ``writer`` this process's channel (called once by the worker bootstrap)."""
    global _current
    _current = writer


def worker_channel():
    """This worker's channel to the kernel, or None outside a launched worker.

    Libraries use it to send events the kernel shows, such as metrics:

    Example:
        >>> channel = worker_channel()
        >>> if channel is not None:
        ...     channel.send("metric", {"values": {"loss": 0.5}, "step": 3})
    """
    return _current
