"""The kernel's side of one started rank process: its ranks, its process and its pipes' read ends.

Reading hands the raw bytes to the carrier's decoders (``backends.carrier_streams``: events frame
by frame, output lines as a terminal would). A pipe is read once a round, at most ``READ_LIMIT``
bytes, so one chatty rank cannot starve the rest. A reply to a ``%%dist`` call comes after
everything the rank printed before it: the output pipes are drained before the reply is delivered.

Example (what the rank group does when a pipe becomes readable)::

    process.read("stdout", drain=False, sink=sink)   # sink.on_text (final lines), sink.on_live
"""

from __future__ import annotations

import os
from typing import Any

from ...wire.spec import RankPipes
from ..base import RankSink
from ..carrier_streams import CarrierStreams
from .base import StartedProcess

__all__ = ["RankProcess", "make_pipes", "close_pipes"]

READ_LIMIT = 1 << 20  # bytes read from one pipe per round, so one chatty rank cannot starve the rest


class RankProcess:
    def __init__(self, ranks: list[int], process: StartedProcess, pipes: RankPipes) -> None:
        self.ranks = ranks
        self.process = process
        self.pipes = {"events": pipes.events, "stdout": pipes.stdout, "stderr": pipes.stderr}
        self._streams = CarrierStreams(ranks)
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
            self._streams.feed(kind, chunk, sink, before_reply=lambda: self._drain_output(sink))
            if kind != "events" and not drain:
                return

    def _drain_output(self, sink: RankSink) -> None:
        for stream in ("stdout", "stderr"):
            self.read(stream, drain=True, sink=sink)

    def close_pipe(self, kind: str, sink: RankSink) -> None:
        """Close one pipe; once all are closed, a line left without a newline is delivered as the
        last line of its stream."""
        os.close(self.pipes.pop(kind))
        if not self.pipes:
            self._streams.finish(sink)

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
