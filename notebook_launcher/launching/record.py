"""What a launch has produced so far: per-rank status, output, metrics, results and failures.

Pure state, filled by the supervisor thread and read by the ``Launch`` handle and the views; no
processes here, so it is tested alone.

Examples:
    >>> record = LaunchRecord(2)
    >>> _ = record.add_output(0, "stdout", "hello\\n")
    >>> record.add_result(0, 42); record.add_result(1, 43)
    >>> record.finish(); record.status, record.results
    ('succeeded', [42, 43])
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ..choices import LaunchStatus, RankStatus
from ..wire import SIGNAL_SENDER_MARK
from .ranklog import LogLine, RankLog, display_text, html_text

if TYPE_CHECKING:
    from ..backends.base import Place
    from .stacks import Stacks

__all__ = ["LaunchRecord", "LogLine", "display_text", "html_text"]  # the last three: from ranklog


class LaunchRecord:
    """The state of one launch. Thread-safe: written by one thread, read by any."""

    def __init__(self, num_ranks: int, first_rank: int = 0) -> None:
        self.first_rank = first_rank
        self.started_at = time.time()
        self.finished_at: float | None = None
        self._lock = threading.Lock()
        self._ranks = range(first_rank, first_rank + num_ranks)
        self._status: dict[int, RankStatus] = {rank: "starting" for rank in self._ranks}
        self._logs = {rank: RankLog(rank) for rank in self._ranks}
        self._seq = 0  # the next line's place in the arrival order of all ranks
        self._results: dict[int, Any] = {}
        self._failures: list[tuple[float, int, BaseException, TracebackType | None]] = []
        self._metrics: list[dict] = []
        self._stopped = False
        self._finished = False
        self.attempt = 0  # restarts so far
        self._past_failures: list[tuple[int, int, BaseException]] = []
        self.waiting = ""  # what the launch waits for now ("waiting for rank 1: ..."), shown live
        self.places: dict[int, Place] = {}  # rank → backends.base.Place, for ranks not on this machine
        self.stragglers: dict[int, str] = {}  # rank → why it lags the others (telemetry.stragglers), this attempt
        self._stacks: dict[int, dict] = {}
        self._stacks_asked: list[int] | None = []
        self._stacks_taken_at: float | None = None
        self._stacks_changed = threading.Condition(self._lock)
        self._former: dict[int, int] = {}  # a number this node's ranks had before a renumbering → theirs now

    @property
    def ranks(self) -> list[int]:
        return list(self._ranks)

    def _now(self, rank: int) -> int:
        """The number the rank that had ``rank`` has now (a reader may hold one from before ``renumber``)."""
        return self._former.get(rank, rank)

    def rank_status(self, rank: int) -> RankStatus:
        with self._lock:
            return self._status[self._now(rank)]

    def set_rank_status(self, rank: int, status: RankStatus) -> None:
        with self._lock:
            self._status[rank] = status

    def renumber(self, first_rank: int, why: str) -> None:
        """This node's ranks are numbered from ``first_rank`` on in this attempt (a c10d rendezvous
        numbers the nodes in the order they arrive, at every restart again). Statuses and logs move
        with them (in local rank order), each log gets a line that says so (``why``), and a number a
        rank had before still reads that rank.

        Examples:
            >>> record = LaunchRecord(2)
            >>> record.renumber(2, "node 1 of 2")
            >>> record.ranks, record.line_count(0), record.lines(3)[0].text
            ([2, 3], 1, "── node 1 of 2: this node's ranks are 2–3 now ──\\n")
        """
        with self._lock:
            old, new = list(self._ranks), range(first_rank, first_rank + len(self._ranks))
            if old == list(new):
                return
            moved = dict(zip(old, new, strict=True))
            self._former = {former: moved[now] for former, now in self._former.items() if former not in new}
            self._former.update({former: now for former, now in moved.items() if former not in new})
            self._ranks, self.first_rank = new, first_rank
            self._status = {moved[rank]: status for rank, status in self._status.items()}
            self._results = {moved[rank]: value for rank, value in self._results.items()}
            self._logs = {moved[rank]: log for rank, log in self._logs.items()}
            line = f"── {why}: this node's ranks are {new[0]}–{new[-1]} now ──\n"
            for rank, log in self._logs.items():
                log.rank = rank
                self._seq += log.add_text("stderr", line, self._seq, time.time())

    def add_output(self, rank: int, stream: str, text: str) -> None:
        """Add complete lines ``text`` (one or many, each ending with a newline) to ``rank``'s log."""
        with self._lock:
            self._seq += self._logs[rank].add_text(stream, text, self._seq, time.time())

    def add_display(
        self, rank: int, data: Mapping[str, Any], display_id: str | None = None, update: bool = False
    ) -> tuple[int, bool]:
        """A rank displayed the mime bundle ``data``; returns (index in its log, whether it replaced).

        With ``update`` (``DisplayHandle.update()``), the entry shown under ``display_id`` is replaced
        in place; an update for an id not shown yet is shown as new, as front ends do.
        """
        with self._lock:
            log = self._logs[self._now(rank)]
            index, replaced = log.add_display(dict(data), display_id, update, self._seq, time.time())
            self._seq += 0 if replaced else 1
            return index, replaced

    def seal_displays(self) -> None:
        """Entries shown so far are history: a later update of one of their display ids is shown as a
        new entry (a ``%%dist`` call's, in its own cell), not as a change to the old one."""
        with self._lock:
            for log in self._logs.values():
                log.seal()

    def lines(self, rank: int, start: int = 0, stop: int | None = None) -> list[LogLine]:
        """``rank``'s log entries (from index ``start`` to ``stop``), in the order they came."""
        with self._lock:
            return self._logs[self._now(rank)].entries(start, stop)

    def line_count(self, rank: int) -> int:
        with self._lock:
            return self._logs[self._now(rank)].count

    def exit_notes(self, rank: int, last: int = 5) -> list[str]:
        """What ``rank``'s process said about its own end (e.g. who sent it SIGTERM), among its last
        ``last`` log lines."""
        return [
            line.text[len(SIGNAL_SENDER_MARK) :].strip()
            for line in self.lines(rank, max(0, self.line_count(rank) - last))
            if line.stream == "stderr" and line.text.startswith(SIGNAL_SENDER_MARK)
        ]

    def text(self, rank: int, stream: str | None = None) -> str:
        """``rank``'s whole log as text (only ``stream``'s lines when given)."""
        with self._lock:
            return self._logs[self._now(rank)].text(stream)

    def interleaved(self, last: int | None = None) -> list[LogLine]:
        """Every rank's entries in arrival order; with ``last``, only each rank's last ``last``."""
        with self._lock:
            parts = [log.entries(max(0, log.count - last) if last else 0) for log in self._logs.values()]
        return list(heapq.merge(*parts, key=lambda line: line.seq))

    def add_metric(self, rank: int, metric: dict, when: float) -> None:
        with self._lock:
            self._metrics.append({"rank": rank, "time": when, "attempt": self.attempt, **metric})

    @property
    def metrics(self) -> list[dict]:
        with self._lock:
            return list(self._metrics)

    @property
    def metric_count(self) -> int:
        return len(self._metrics)

    def metrics_between(self, start: int, stop: int | None = None) -> list[dict]:
        """The metrics logged from the ``start``-th to before the ``stop``-th (the end by default)."""
        with self._lock:
            return self._metrics[start:stop]

    def add_result(self, rank: int, value: Any) -> None:
        with self._lock:
            self._results[rank] = value
            self._status[rank] = "done"

    def add_failure(
        self, rank: int | None, exception: BaseException, when: float, traceback: TracebackType | None = None
    ) -> None:
        """Record that ``rank`` failed at ``when`` (``rank`` None: the launch itself); the earliest
        failure is the launch's cause. ``traceback``: the rank's frames, re-attached when raised."""
        with self._lock:
            self._failures.append(
                (
                    when,
                    -1 if rank is None else rank,
                    exception,
                    traceback if traceback is not None else exception.__traceback__,
                )
            )
            if rank is not None:
                self._status[rank] = "failed"

    # -- stacks ---------------------------------------------------------------------------------------

    def stacks_requested(self, ranks: Iterable[int] | None = None) -> None:
        """The kernel asks for stacks: answers from before are stale. ``ranks`` are the ranks asked
        (None: not known yet — the supervisor fills them in when it sends the request)."""
        with self._lock:
            self._stacks = {}
            self._stacks_asked = None if ranks is None else list(ranks)
            self._stacks_taken_at = time.time()

    def add_stacks(self, rank: int, report: dict) -> None:
        with self._stacks_changed:
            self._stacks[rank] = report
            self._stacks_changed.notify_all()

    # -- attempts (restarts) --------------------------------------------------------------------------

    def begin_attempt(self, attempt: int, max_restarts: int, reason: str) -> None:
        """A restart: the failed attempt's failure is kept, statuses start over, and every rank's log
        gets a line that says so (its lines from before stay)."""
        line = f"── restart {attempt} of {max_restarts}: {reason} ──\n"
        with self._lock:
            self._past_failures.extend((attempt - 1, rank, exc) for _, rank, exc, _ in self._failures)
            self._failures = []
            self._results = {}
            self._status = {rank: "starting" for rank in self._ranks}
            self._stopped = False
            self.stragglers = {}
            self.attempt = attempt
            for rank in self._ranks:
                self._seq += self._logs[rank].add_text("stderr", line, self._seq, time.time())

    @property
    def past_failures(self) -> list[tuple[int, int, BaseException]]:
        """(attempt, rank, exception) of every failed attempt before this one."""
        with self._lock:
            return list(self._past_failures)

    def _answered(self) -> bool:
        return self._stacks_asked is not None and all(rank in self._stacks for rank in self._stacks_asked)

    def stacks_complete(self) -> bool:
        with self._lock:
            return self._answered()

    def wait_for_stacks(self, timeout: float | None) -> bool:
        """Wait until every rank asked has answered (at most ``timeout`` seconds)."""
        with self._stacks_changed:
            return self._stacks_changed.wait_for(lambda: self._answered() or self._finished, timeout)

    def latest_stacks(self) -> Stacks | None:
        """The answers to the last request, as ``Stacks`` (None if none was made)."""
        from .stacks import Stacks

        with self._lock:
            if self._stacks_asked is None or (not self._stacks_asked and not self._stacks):
                return None
            missing = [rank for rank in self._stacks_asked if rank not in self._stacks]
            return Stacks(dict(self._stacks), missing, self._stacks_taken_at)

    def mark_stopped(self) -> None:
        """The user stopped the launch (interrupt or ``stop()``)."""
        self._stopped = True

    def finish(self) -> None:
        """No more events will come: ranks still starting or running were stopped."""
        with self._stacks_changed:
            self._stacks_changed.notify_all()
            for rank, status in self._status.items():
                if status in ("starting", "running"):
                    self._status[rank] = "stopped"
            self.finished_at = time.time()
            self._finished = True

    @property
    def finished(self) -> bool:
        return self._finished

    @property
    def status(self) -> LaunchStatus:
        """ "running" until finished; then "failed", "stopped" or "succeeded"."""
        if not self._finished:
            return "running" if any(s != "starting" for s in self._status.values()) else "starting"
        if self._failures:
            return "failed"
        if self._stopped or len(self._results) < len(self._status):
            return "stopped"
        return "succeeded"

    @property
    def failure(self) -> BaseException | None:
        """The exception of the first rank that failed (earliest in time), or None."""
        with self._lock:
            return min(self._failures, key=lambda item: (item[0], item[1]))[2] if self._failures else None

    @property
    def failure_traceback(self) -> TracebackType | None:
        """The traceback the first failure came with (the rank's frames), or None."""
        with self._lock:
            return min(self._failures, key=lambda item: (item[0], item[1]))[3] if self._failures else None

    @property
    def failed_rank(self) -> int | None:
        with self._lock:
            rank = min(self._failures, key=lambda item: (item[0], item[1]))[1] if self._failures else None
            return None if rank == -1 else rank

    @property
    def results(self) -> list[Any]:
        """Every rank's return value in rank order (None for a rank that returned nothing)."""
        with self._lock:
            return [self._results.get(rank) for rank in self._ranks]

    @property
    def elapsed(self) -> float:
        return (self.finished_at or time.time()) - self.started_at
