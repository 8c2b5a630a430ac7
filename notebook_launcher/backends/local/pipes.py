"""The kernel's side of one started rank process: its ranks, its process and its pipes' read ends.

Reading turns the raw bytes into what they mean: events from the channel (decoded frame by frame)
and output lines (split as a terminal would). Output comes two ways: what Python's streams wrote,
as ``OUTPUT`` events in the order written (``rank.ordered_output``), and what C code and
subprocesses wrote to descriptors 1 and 2. Each way has a line reader of its own per rank and
stream: a line C code is half-way through (gloo prints in pieces) must not take in a line Python
wrote meanwhile, which the kernel may read first.
Output on the descriptors belongs to the process's first rank; events name their own rank (a
torch_xla host carries several). A reply to a ``%%dist`` call comes after everything the rank
printed before it: the output pipes are drained before the reply is delivered.

Example (what the rank group does when a pipe becomes readable)::

    process.read("stdout", drain=False, sink=sink)   # sink.on_text (final lines), sink.on_live
"""

from __future__ import annotations

import os
from typing import Any

from ...wire import DISPLAY, OUTPUT, REPLY, FrameReader, LineReader
from ...wire.events import output_parts
from ...wire.spec import RankPipes
from ..base import RankSink
from .base import StartedProcess

__all__ = ["RankProcess", "make_pipes", "close_pipes"]

_OTHER = {"stdout": "stderr", "stderr": "stdout"}

READ_LIMIT = 1 << 20  # bytes read from one pipe per round, so one chatty rank cannot starve the rest


class RankProcess:
    def __init__(self, ranks: list[int], process: StartedProcess, pipes: RankPipes) -> None:
        self.ranks = ranks
        self.process = process
        self.pipes = {"events": pipes.events, "stdout": pipes.stdout, "stderr": pipes.stderr}
        self._frames = FrameReader()
        # (rank, stream, way: "events" or "fd") → its reader, made at the first output (a quick rank may print nothing)
        self._lines: dict[tuple[int, str, str], LineReader] = {}
        self.exitcode: int | None = None
        self.signalled = False  # the launcher ended it (a sibling failed, or a stop)

    @property
    def first_rank(self) -> int:
        return self.ranks[0]

    @property
    def exited(self) -> bool:
        return self.exitcode is not None

    def read(self, kind: str, drain: bool, sink: RankSink) -> None:
        """Read what pipe ``kind`` holds (all of it with ``drain``, else up to ``READ_LIMIT`` bytes).

        Output is read once a round (a pipe holds 64 KiB): a rank sends a display only once its
        earlier output has been read, and output it writes after that display must wait for the
        next round, where the events pipe is read first."""
        fd = self.pipes.get(kind)
        if fd is None:
            return
        total = 0
        while drain or total < READ_LIMIT:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                return
            if not chunk:
                self.close_pipe(kind, sink)
                return
            total += len(chunk)
            self._consume(kind, chunk, sink)
            if kind != "events" and not drain:
                return

    def _consume(self, kind: str, chunk: bytes, sink: RankSink) -> None:
        if kind == "events":
            for event in self._frames.feed(chunk):
                if type(event) is tuple and event and type(event[0]) is str and event[0] == REPLY:
                    self._drain_output(sink)  # the rank flushed its output before replying
                output = self._output(event)
                if output is not None:
                    rank, stream, data = output
                    self._interrupt(rank, _OTHER[stream], sink)
                    reader = self._reader(rank, stream, "events")
                    self._deliver(rank, stream, reader.feed(data), reader, sink)
                else:
                    if type(event) is tuple and len(event) == 4 and event[0] == DISPLAY and event[3] in self.ranks:
                        for stream in _OTHER:  # a display comes below the rows drawn before it
                            self._interrupt(event[3], stream, sink)
                    sink.on_event(self.ranks, event)
            return
        reader = self._reader(self.first_rank, kind, "fd")
        self._deliver(self.first_rank, kind, reader.feed(chunk), reader, sink)

    def _output(self, event: Any) -> tuple[int, str, bytes] | None:
        """(rank, stream, bytes) of a well-formed output event from one of this process's ranks;
        None for any other event (the supervisor decodes those, and rejects what is malformed)."""
        if not (type(event) is tuple and len(event) == 4 and event[0] == OUTPUT and event[3] in self.ranks):
            return None
        parts = output_parts(event[1])
        if parts is None:
            return None
        stream, data = parts
        return event[3], stream, data.encode("utf-8", "backslashreplace") if isinstance(data, str) else data

    def _interrupt(self, rank: int, stream: str, sink: RankSink) -> None:
        """The rank's other Python stream, or a display, comes next: this stream's open rows (a bar
        drawn with ``\\r``) end as they show now, so they come before it."""
        reader = self._lines.get((rank, stream, "events"))
        if reader is not None and reader.open:
            self._deliver(rank, stream, reader.interrupt(), reader, sink)

    def _reader(self, rank: int, stream: str, way: str) -> LineReader:
        reader = self._lines.get((rank, stream, way))
        if reader is None:
            reader = self._lines[(rank, stream, way)] = LineReader()
        return reader

    def _deliver(self, rank: int, stream: str, text: str, reader: LineReader, sink: RankSink) -> None:
        """Lines made final (if any), then what the stream still shows live."""
        if text:
            sink.on_text(rank, stream, text)
        sink.on_live(rank, stream, reader.live)

    def _drain_output(self, sink: RankSink) -> None:
        for stream in ("stdout", "stderr"):
            self.read(stream, drain=True, sink=sink)
        for (rank, stream, _), reader in list(self._lines.items()):
            self._deliver(rank, stream, reader.settle(), reader, sink)  # the call ended: its bars are final

    def close_pipe(self, kind: str, sink: RankSink) -> None:
        """Close one pipe; once all are closed, a line left without a newline is delivered as the
        last line of its stream."""
        os.close(self.pipes.pop(kind))
        if self.pipes:
            return
        for (rank, stream, _), reader in self._lines.items():
            rest = reader.finish()
            if rest:
                sink.on_text(rank, stream, rest)

    def drain_and_close(self, sink: RankSink) -> None:
        """Read everything left on every pipe (what the process wrote before it ended), then close them."""
        for kind in list(self.pipes):
            self.read(kind, drain=True, sink=sink)
            if kind in self.pipes:
                self.close_pipe(kind, sink)


def make_pipes() -> tuple[RankPipes, RankPipes]:
    """Three pipes for one rank process: (the kernel's read ends, the process's write ends)."""
    ends = [os.pipe() for _ in range(3)]
    for read_end, _ in ends:
        os.set_blocking(read_end, False)
        _enlarge(read_end)
    ours = RankPipes(*(read_end for read_end, _ in ends))
    theirs = RankPipes(*(write_end for _, write_end in ends))
    return ours, theirs


def _enlarge(fd: int) -> None:
    """Give the pipe 1 MiB of buffer (Linux; 64 KiB otherwise), so a burst of output does not make the
    rank wait for the kernel to read."""
    import fcntl

    try:
        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)
    except OSError:  # above /proc/sys/fs/pipe-max-size, or not Linux: the default size works too
        pass


def close_pipes(pipes: Any) -> None:
    for fd in (pipes.events, pipes.stdout, pipes.stderr):
        try:
            os.close(fd)
        except OSError:
            pass
