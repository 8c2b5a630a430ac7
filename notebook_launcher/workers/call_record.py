"""One call on the workers as a launch of its own for the views: its ranks, lines, metrics, result.

The launch views (the live widget, its static form, rank-prefixed text) read a ``Launch``; a call
shows itself through the same views with this stand-in, whose record holds only what the called
ranks wrote during the call. So a ``%%dist`` cell gets the widget while it runs and a static form
(every rank's lines, the traceback of a failing rank) that the saved notebook keeps.

Examples:
    >>> class Workers:   # what a call reads of the workers' launch
    ...     id, ranks, plan, attempt = "abc", [0, 1], None, 0
    ...     def stacks(self, timeout=5.0): return {}
    >>> call = CallLaunch(Workers(), 3, [0, 1])
    >>> call.record.add_output(1, "stdout", "hi\\n"); call.finish({0: None, 1: 7}, None)
    >>> call.id, call.status, call.results, call.logs(1)
    ('abc.3', 'succeeded', [None, 7], 'hi\\n')
"""

from __future__ import annotations

from typing import Any

from ..launching.listener import LaunchState
from ..launching.record import LaunchRecord

__all__ = ["CallLaunch"]


class CallLaunch:
    """What a launch view reads, for one call to some ranks of the workers."""

    kind = "call"
    waited_on = True  # the calling cell raises the call's failure: the view need not show its traceback
    reports_return_type = False  # a cell's values are shown after it, as IPython would show them

    def __init__(self, workers_launch: LaunchState, call_id: int, ranks: list[int]) -> None:
        self._launch = workers_launch
        self.id = f"{workers_launch.id}.{call_id}"
        self.plan = workers_launch.plan
        self.attempt = 0
        self.waiting = ""
        self.last_stacks = None
        self.called = list(ranks)
        contiguous = ranks == list(range(ranks[0], ranks[0] + len(ranks)))
        shown = ranks if contiguous else list(workers_launch.ranks)
        self.record = LaunchRecord(len(shown), shown[0])
        for rank in shown:
            self.record.set_rank_status(rank, "running" if rank in ranks else "done")
        self._done = False

    def finish(self, values: dict[int, Any], failure: tuple[int, BaseException] | None) -> None:
        """The call ended: the values ranks returned (by rank), and the failing rank and its error."""
        for rank in self.ranks:
            if rank in values or rank not in self.called:
                self.record.add_result(rank, values.get(rank))
        if failure is not None:
            rank, exception = failure
            self.record.set_rank_status(rank, "failed")
            self.record.add_failure(rank, exception, 0.0, exception.__traceback__)
        self.record.finish()
        self._done = True

    def stacks(self, timeout: float = 5.0) -> Any:
        return self._launch.stacks(timeout)

    @property
    def done(self) -> bool:
        return self._done

    @property
    def status(self) -> str:
        return self.record.status

    def rank_status(self, rank: int) -> str:
        return self.record.rank_status(rank)

    @property
    def ranks(self) -> list[int]:
        return self.record.ranks

    @property
    def results(self) -> list:
        return self.record.results

    @property
    def exception(self) -> BaseException | None:
        return self.record.failure

    @property
    def failed_rank(self) -> int | None:
        return self.record.failed_rank

    @property
    def failure_traceback(self) -> Any:
        return self.record.failure_traceback

    @property
    def metrics(self) -> list:
        return self.record.metrics

    @property
    def elapsed(self) -> float:
        return self.record.elapsed

    def lines(self, rank: int, start: int = 0, stop: int | None = None) -> list:
        return self.record.lines(rank, start, stop)

    def line(self, rank: int, index: int) -> Any:
        return self.record.lines(rank, index)[0]

    def line_count(self, rank: int) -> int:
        return self.record.line_count(rank)

    def interleaved(self, last: int | None = None) -> list:
        return self.record.interleaved(last)

    def logs(self, rank: int, stream: str | None = None) -> str:
        return self.record.text(rank, stream)
