"""One call on the workers as a launch of its own for the views: a window over the workers' record.

The launch views (the live widget, its static form, rank-prefixed text) read a ``Launch``; a call
shows itself through the same views with this stand-in. Its lines and metrics are a window over the
workers' one record — the entries the called ranks added between the call's start and its end — so
nothing is copied; its statuses, results and failure are the call's own. A ``%%dist`` cell gets the
widget while it runs and a static form (every rank's lines, the traceback of a failing rank) that
the saved notebook keeps.

Examples:
    >>> from notebook_launcher.launching.record import LaunchRecord
    >>> class Workers:   # what a call reads of the workers' launch
    ...     id, ranks, plan, attempt = "abc", [0, 1], None, 0
    ...     record = LaunchRecord(2)
    ...     def stacks(self, timeout=5.0): return {}
    >>> workers = Workers()
    >>> workers.record.add_output(1, "stdout", "before\\n")
    >>> workers.record.add_metric(0, {"values": {"loss": 9.0}}, 0.0)   # before the call: not its own
    >>> call = CallLaunch(workers, 3, [0, 1])
    >>> workers.record.add_metric(1, {"values": {"loss": 0.5}}, 0.0)
    >>> workers.record.add_output(1, "stdout", "hi\\n"); call.finish({0: None, 1: 7}, None)
    >>> workers.record.add_output(1, "stdout", "after\\n")
    >>> call.id, call.status, call.results, call.logs(1)
    ('abc.3', 'succeeded', [None, 7], 'hi\\n')
    >>> workers.record.add_metric(0, {"values": {"loss": 7.0}}, 0.0)   # after the call: not its own
    >>> [metric["values"] for metric in call.metrics], call.line_count(1), call.line_count(0)
    ([{'loss': 0.5}], 1, 0)
"""

from __future__ import annotations

import heapq
from typing import Any, Protocol

from ..launching.reading import LaunchReading
from ..launching.record import LaunchRecord, LogLine

__all__ = ["CallLaunch"]


class WorkersLaunch(Protocol):
    """What a call reads of the workers' launch."""

    id: str
    plan: Any

    @property
    def ranks(self) -> list[int]: ...

    @property
    def record(self) -> LaunchRecord: ...

    def stacks(self, timeout: float = 5.0) -> Any: ...


class CallLaunch(LaunchReading):
    """What a launch view reads, for one call to some ranks of the workers: its statuses, results
    and failure from a record of its own, its lines and metrics from the workers' record, within
    the call's window."""

    kind = "call"
    waited_on = True  # the calling cell raises the call's failure: the view need not show its traceback
    reports_return_type = False  # a cell's values are shown after it, as IPython would show them

    def __init__(self, workers_launch: WorkersLaunch, call_id: int, ranks: list[int]) -> None:
        self._launch = workers_launch
        self._lines = workers_launch.record
        self.id = f"{workers_launch.id}.{call_id}"
        self.plan = workers_launch.plan
        self.attempt = 0
        self.waiting = ""
        self.last_stacks = None
        self.called = list(ranks)
        contiguous = ranks == list(range(ranks[0], ranks[0] + len(ranks)))
        shown = ranks if contiguous else list(workers_launch.ranks)
        self._record = LaunchRecord(len(shown), shown[0])  # the call's statuses, results and failure
        for rank in shown:
            self.record.set_rank_status(rank, "running" if rank in ranks else "done")
        # a display updated by id during this call is shown in this call, not in an earlier cell's entry
        self._lines.seal_displays()
        self._starts = {rank: self._lines.line_count(rank) for rank in self.called}
        self._ends: dict[int, int] | None = None
        self._metrics_start = self._lines.metric_count
        self._metrics_end: int | None = None
        self._done = False

    def finish(
        self, values: dict[int, Any], failure: tuple[int, BaseException] | None, interrupted: bool = False
    ) -> None:
        """The call ended: the values ranks returned (by rank), and the failing rank and its error, or
        ``interrupted`` by the user (the call stopped, no rank failed). The window closes: what the
        ranks write from now on belongs to the workers, not to this call."""
        self._ends = {rank: self._lines.line_count(rank) for rank in self.called}
        self._metrics_end = self._lines.metric_count
        for rank in self.ranks:
            if rank in values or rank not in self.called:
                self.record.add_result(rank, values.get(rank))
        if failure is not None:
            rank, exception = failure
            self.record.set_rank_status(rank, "failed")
            self.record.add_failure(rank, exception, 0.0, exception.__traceback__)
        if interrupted:
            self.record.mark_stopped()
            for rank in self.called:
                self.record.set_rank_status(rank, "stopped")
        self.record.finish()
        self._done = True

    def index_in_call(self, rank: int, index: int) -> int | None:
        """Where entry ``index`` of ``rank``'s log (in the workers' record) is in this call (None: outside it)."""
        start = self._starts.get(rank)
        if start is None or index < start or (self._ends is not None and index >= self._ends[rank]):
            return None
        return index - start

    def _span(self, rank: int) -> tuple[int, int]:
        if rank not in self._starts:
            return 0, 0
        end = self._ends[rank] if self._ends is not None else self._lines.line_count(rank)
        return self._starts[rank], end

    def stacks(self, timeout: float = 5.0) -> Any:
        return self._launch.stacks(timeout)

    @property
    def done(self) -> bool:
        return self._done

    def place(self, rank: int) -> Any:
        return self._launch.record.places.get(rank)

    @property
    def metrics(self) -> list:
        window = self._lines.metrics_between(self._metrics_start, self._metrics_end)
        return [metric for metric in window if metric["rank"] in self._starts]

    def lines(self, rank: int, start: int = 0, stop: int | None = None) -> list[LogLine]:
        first, end = self._span(rank)
        stop = end if stop is None else min(end, first + stop)
        return self._lines.lines(rank, first + start, stop) if first + start < stop else []

    def line(self, rank: int, index: int) -> LogLine:
        return self.lines(rank, index, index + 1)[0]

    def line_count(self, rank: int) -> int:
        first, end = self._span(rank)
        return end - first

    def interleaved(self, last: int | None = None) -> list[LogLine]:
        parts = [self.lines(rank, max(0, self.line_count(rank) - last) if last else 0) for rank in self.called]
        return list(heapq.merge(*parts, key=lambda line: line.seq))

    def logs(self, rank: int, stream: str | None = None) -> str:
        return "".join(line.text for line in self.lines(rank) if stream in (None, line.stream))
