"""The reading half of the local rank group: the live ranks, what to wait on (each process's pipes
and exit descriptor), and reading what is ready (``RankProcess``) until each rank's exit.
``LocalRankGroup`` adds how ranks start, are signalled and are cleaned up. (Ranks the kernel cannot
wait on as descriptors use ``backends.remote`` instead.)

Examples:
    >>> group = PipedRankGroup()
    >>> group.live_ranks, group.waitables()
    ([], [])
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from ..base import RankSink
from .pipes import RankProcess

__all__ = ["PipedRankGroup"]


class PipedRankGroup:
    """The reading half of a ``RankGroup`` over ``RankProcess`` es (``_processes``)."""

    def __init__(self) -> None:
        self._processes: list[RankProcess] = []
        self._watch: dict[Any, tuple[RankProcess, str]] = {}

    @property
    def live_ranks(self) -> list[int]:
        return [rank for process in self._live() for rank in process.ranks]

    def waitables(self) -> list[Any]:
        self._watch = {}
        for process in self._live():
            for kind, fd in process.pipes.items():
                self._watch[fd] = (process, kind)
            self._watch[process.process.sentinel] = (process, "exit")
        return list(self._watch)

    def read(self, ready: list[Any], sink: RankSink) -> None:
        # events first: a rank sends a display only once the kernel has read the output before it,
        # so output waiting beside an event was written after it
        for fd in sorted(ready, key=lambda fd: self._watch.get(fd, (None, ""))[1] != "events"):
            process, kind = self._watch.get(fd, (None, ""))
            if process is None or process.exited:
                continue
            if kind == "exit":
                self._on_exit(process, sink)
            elif kind in process.pipes:
                process.read(kind, drain=False, sink=sink)

    def _on_exit(self, process: RankProcess, sink: RankSink) -> None:
        """The rank's carrier ended: its exit code, what it wrote last, then the sink is told."""
        process.exitcode = process.process.wait()
        process.drain_and_close(sink)
        sink.on_exit(process.ranks, process.exitcode, process.signalled, getattr(process.process, "lost", None))

    def _live(self) -> list[RankProcess]:
        return [process for process in self._processes if not process.exited]

    def _signal_live(self, spare: Collection[int] = ()) -> list[RankProcess]:
        """The live ranks but those all of whose ranks are in ``spare``, marked as ended by the
        launcher (they are about to be signalled)."""
        live = [process for process in self._live() if not set(process.ranks) <= set(spare)]
        for process in live:
            process.signalled = True
        return live
