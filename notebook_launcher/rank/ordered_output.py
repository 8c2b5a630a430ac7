"""A rank's ``sys.stdout`` and ``sys.stderr``: one ordered stream of output events, as a terminal keeps it.

On two pipes, the order between what a rank printed and what it wrote to stderr is lost twice: each
stream batches on its own, and the kernel reads two ready pipes in no fixed order (``print`` then
``print(file=sys.stderr)`` three times came out as out, out, out, err, err, err). So Python's two
streams share one ``OrderedOutput``: each write joins a list of runs in the order it was made, and
the runs travel on the rank's event channel as ``OUTPUT`` events, ordered with everything else the
rank sends (displays, results, replies). A terminal and a notebook cell keep that order too.

``print`` stays a ``memcpy``: ``sys.stdout`` is a block-buffered ``TextIOWrapper`` whose buffer
fills in C and reaches the runs only when it flushes. ``sys.stderr`` hands stdout's pending text to
the runs before each of its writes, then its own, so a line to stderr never overtakes a print made
before it. The runs are sent when ``flush()`` is called (the rank's output thread does so every
``FLUSH_INTERVAL``) or once they hold ``SEND_AT`` bytes.

``fileno()`` is still 1 or 2, the raw pipes: C code (gloo, NCCL), subprocesses and ``faulthandler``
write there, unordered with Python's writes, as before. A process forked from the rank (a DataLoader
worker) writes its streams to those descriptors too: the channel is the rank's, and frames from two
processes would interleave. The rank sends what it holds before it forks, so the child does not
write it a second time (as ``multiprocessing`` flushes before it forks).

Example::

    streams = RankStreams.make()          # before the channel exists (the kernel, before forking)
    streams.output.attach(channel)        # in the rank
    sys.stdout, sys.stderr = streams.stdout, streams.stderr
"""

from __future__ import annotations

import io
import os
import threading
import weakref
from dataclasses import dataclass
from typing import Any

from ..wire import OUTPUT

__all__ = ["OrderedOutput", "RankStreams", "CHUNK", "SEND_AT"]

SEND_AT = 1 << 16  # bytes of runs that are sent without waiting for a flush
CHUNK = 1 << 18  # the most bytes one output event carries
_BUFFER = 1 << 16
_FDS = {"stdout": 1, "stderr": 2}


class OrderedOutput:
    """What a rank's Python streams wrote, in the order written, until it is sent.

    Examples:
        >>> import os
        >>> from notebook_launcher.wire import ChannelWriter, FrameReader
        >>> r, w = os.pipe()
        >>> output = OrderedOutput()
        >>> output.attach(ChannelWriter(w, rank=0))
        >>> output.add("stdout", b"a\\n"); output.add("stderr", b"b\\n"); output.add("stdout", b"c\\n")
        >>> output.send()
        >>> [event[1] for event in FrameReader().feed(os.read(r, 4096))]
        [('stdout', b'a\\n'), ('stderr', b'b\\n'), ('stdout', b'c\\n')]
    """

    def __init__(self) -> None:
        self._runs: list[tuple[str, list[bytes]]] = []
        self._size = 0
        self._lock = threading.RLock()  # re-entered by a write from a signal handler mid-send
        self._channel: Any = None
        self._pid = -1
        self.streams: tuple[io.TextIOWrapper, ...] = ()  # the streams writing here (sent before a fork)
        _made.add(self)

    def attach(self, channel: Any) -> None:
        """Send through ``channel`` from this process (until then, and in processes forked from
        it, the runs go to descriptors 1 and 2)."""
        self._channel = channel
        self._pid = os.getpid()

    def add(self, stream: str, data: Any) -> None:
        """Append ``data`` (bytes) written to ``stream`` ("stdout" or "stderr") to the runs."""
        with self._lock:
            runs = self._runs
            if runs and runs[-1][0] == stream:
                runs[-1][1].append(bytes(data))  # a copy: a buffered writer reuses its buffer
            else:
                runs.append((stream, [bytes(data)]))
            self._size += len(data)
            if self._size >= SEND_AT:
                self.send()

    def send(self) -> None:
        """Send the runs, in order (blocks while the pipe is full, never drops them)."""
        with self._lock:
            runs, self._runs, self._size = self._runs, [], 0
            channel = self._channel if self._pid == os.getpid() else None
            for stream, pieces in runs:
                data = b"".join(pieces)
                if channel is None:
                    _write_all(_FDS[stream], data)
                    continue
                for start in range(0, len(data), CHUNK):
                    channel.send(OUTPUT, (stream, data[start : start + CHUNK]))

    def _send_before_fork(self) -> None:
        if self._pid != os.getpid():  # not attached here (the kernel's streams made for its ranks)
            return
        for stream in self.streams:
            try:
                io.TextIOWrapper.flush(stream)
            except (OSError, ValueError, RuntimeError):  # closed, or a write under way on this thread
                pass
        self.send()

    def _forget_in_child(self) -> None:
        """In a forked child: the runs are the parent's to send, and the lock may be held by a
        thread that does not exist here."""
        self._runs, self._size = [], 0
        self._lock = threading.RLock()


_made: weakref.WeakSet[OrderedOutput] = weakref.WeakSet()


def _send_before_forks() -> None:
    for output in list(_made):
        output._send_before_fork()


def _forget_in_children() -> None:
    for output in list(_made):
        output._forget_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_send_before_forks, after_in_child=_forget_in_children)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except OSError:  # no such descriptor, or nobody reads it: as a closed stream, nothing to do
            return


class _Runs(io.RawIOBase):
    """The raw end of one stream: what its buffer flushes joins the ordered runs."""

    def __init__(self, output: OrderedOutput, stream: str) -> None:
        self._output = output
        self._stream = stream

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self._output.add(self._stream, data)
        return len(data)

    def fileno(self) -> int:
        return _FDS[self._stream]

    def isatty(self) -> bool:
        return False


class _Stdout(io.TextIOWrapper):
    """``sys.stdout``: writes fill the buffer at C speed; ``flush`` sends (what a user expects of it)."""

    output: OrderedOutput

    def flush(self) -> None:
        super().flush()
        self.output.send()


class _Stderr(_Stdout):
    """``sys.stderr``: stdout's pending text joins the runs before each write, then the write itself."""

    before: io.TextIOWrapper

    def write(self, text: str) -> int:
        io.TextIOWrapper.flush(self.before)
        written = super().write(text)
        io.TextIOWrapper.flush(self)
        return written


@dataclass(frozen=True)
class RankStreams:
    """A rank's two Python streams and the ordered output they share."""

    output: OrderedOutput
    stdout: io.TextIOWrapper
    stderr: io.TextIOWrapper

    @classmethod
    def make(cls) -> RankStreams:
        """Two streams over one new ``OrderedOutput`` (not yet attached to a channel)."""
        output = OrderedOutput()
        stdout = _Stdout(_buffered(output, "stdout"), encoding="utf-8", errors="backslashreplace")
        stderr = _Stderr(_buffered(output, "stderr"), encoding="utf-8", errors="backslashreplace")
        stdout.output = stderr.output = output
        stderr.before = stdout
        output.streams = (stdout, stderr)
        return cls(output, stdout, stderr)


def _buffered(output: OrderedOutput, stream: str) -> io.BufferedWriter:
    return io.BufferedWriter(_Runs(output, stream), _BUFFER)
