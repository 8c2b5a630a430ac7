"""What one carrier of ranks (a process, an actor) sends, decoded: its events channel frame by
frame, and its output split into lines as a terminal would.

A carrier's bytes arrive on three streams: ``events`` (the channel: ``wire.FrameReader``),
``stdout`` and ``stderr`` (what C code and subprocesses wrote to descriptors 1 and 2). Output also
comes as ``OUTPUT`` events (what Python's streams wrote, in the order written:
``rank.ordered_output``). Each way has a line reader of its own per rank and stream: a line C code is
half-way through (gloo prints in pieces) must not take in a line Python wrote meanwhile. Output on
the descriptors belongs to the carrier's first rank; events name their own rank (a torch_xla host
carries several). How the bytes reach the kernel (local pipes, a cluster's long poll, a backend's
own queue) is the carrier's business: every rank group decodes them here, so every backend shows
the same lines in the same order.

Examples:
    >>> class Sink:
    ...     def on_text(self, rank, stream, text): print(rank, stream, repr(text))
    ...     def on_live(self, rank, stream, text): pass
    ...     def on_event(self, ranks, event): print(ranks, event)
    >>> streams = CarrierStreams([0])
    >>> streams.feed("stdout", b"hello\\nwor", Sink())
    0 stdout 'hello\\n'
    >>> streams.finish(Sink())
    0 stdout 'wor\\n'
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..wire import DISPLAY, OUTPUT, REPLY, FrameReader, LineReader
from ..wire.events import output_parts
from .base import RankSink

__all__ = ["CarrierStreams", "STREAMS"]

STREAMS = ("events", "stdout", "stderr")  # what a carrier sends, by name
_OTHER = {"stdout": "stderr", "stderr": "stdout"}


class CarrierStreams:
    """The decoders of one carrier of ``ranks``; ``feed`` bytes in the order each stream sent them."""

    def __init__(self, ranks: Sequence[int]) -> None:
        self.ranks = list(ranks)
        self._frames = FrameReader()
        # (rank, stream, way: "events" or "fd") → its reader, made at the first output (a quick rank may print nothing)
        self._lines: dict[tuple[int, str, str], LineReader] = {}

    def feed(self, kind: str, chunk: bytes, sink: RankSink, before_reply: Callable[[], None] | None = None) -> None:
        """Decode ``chunk`` of stream ``kind`` into ``sink``. ``before_reply`` brings in whatever
        output the carrier wrote before a ``%%dist`` reply and is still in transit (a local
        process's pipes); a reply then settles every open bar (the call has ended)."""
        if kind != "events":
            reader = self._reader(self.ranks[0], kind, "fd")
            self._deliver(self.ranks[0], kind, reader.feed(chunk), reader, sink)
            return
        for event in self._frames.feed(chunk):
            if type(event) is tuple and event and type(event[0]) is str and event[0] == REPLY:
                if before_reply is not None:
                    before_reply()
                self.settle(sink)
            output = self._output(event)
            if output is not None:
                rank, stream, data = output
                self._interrupt(rank, _OTHER[stream], sink)
                reader = self._reader(rank, stream, "events")
                self._deliver(rank, stream, reader.feed(data), reader, sink)
                continue
            if type(event) is tuple and len(event) == 4 and event[0] == DISPLAY and event[3] in self.ranks:
                for stream in _OTHER:  # a display comes below the rows drawn before it
                    self._interrupt(event[3], stream, sink)
            sink.on_event(self.ranks, event)

    def settle(self, sink: RankSink) -> None:
        """Every open row (a bar drawn with ``\\r``) becomes final as it shows now."""
        for (rank, stream, _), reader in list(self._lines.items()):
            self._deliver(rank, stream, reader.settle(), reader, sink)

    def finish(self, sink: RankSink) -> None:
        """The carrier sends nothing more: a line left without a newline is its stream's last."""
        for (rank, stream, _), reader in self._lines.items():
            rest = reader.finish()
            if rest:
                sink.on_text(rank, stream, rest)

    def _output(self, event: Any) -> tuple[int, str, bytes] | None:
        """(rank, stream, bytes) of a well-formed output event from one of this carrier's ranks;
        None for any other event (the supervisor decodes those, and rejects what is malformed)."""
        if not (type(event) is tuple and len(event) == 4 and event[0] == OUTPUT and event[3] in self.ranks):
            return None
        parts = output_parts(event[1])
        if parts is None:
            return None
        stream, data = parts
        return event[3], stream, data.encode("utf-8", "backslashreplace") if isinstance(data, str) else data

    def _interrupt(self, rank: int, stream: str, sink: RankSink) -> None:
        """The rank's other Python stream, or a display, comes next: this stream's open rows end as
        they show now, so they come before it."""
        reader = self._lines.get((rank, stream, "events"))
        if reader is not None and reader.open:
            self._deliver(rank, stream, reader.interrupt(), reader, sink)

    def _reader(self, rank: int, stream: str, way: str) -> LineReader:
        reader = self._lines.get((rank, stream, way))
        if reader is None:
            reader = self._lines[(rank, stream, way)] = LineReader()
        return reader

    @staticmethod
    def _deliver(rank: int, stream: str, text: str, reader: LineReader, sink: RankSink) -> None:
        """Lines made final (if any), then what the stream still shows live."""
        if text:
            sink.on_text(rank, stream, text)
        sink.on_live(rank, stream, reader.live)
