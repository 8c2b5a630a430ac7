"""What a launch has produced so far: per-rank status, output, metrics, results and failures.

Pure state, filled by the supervisor thread and read by the ``Launch`` handle and the views; no
processes here, so it is tested alone.

Example:
    >>> record = LaunchRecord(2)
    >>> record.add_output(0, "stdout", "hello\\n")
    >>> record.add_result(0, 42); record.add_result(1, 43)
    >>> record.finish(); record.status, record.results
    ('succeeded', [42, 43])
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

__all__ = ["LaunchRecord", "LogLine", "display_text"]


def display_text(data):
    """How a rank's ``display()`` bundle reads in its log: its text/plain form, as one line.

    Example:
        >>> display_text({"text/plain": "{'answer': 42}", "image/png": "..."})
        "{'answer': 42}\\n"
    """
    return data.get("text/plain", "<display>") + "\n"


@dataclass(frozen=True)
class LogLine:
    """One line a rank wrote: ``stream`` is "stdout" or "stderr"; ``time`` when the kernel got it."""

    rank: int
    stream: str
    text: str
    time: float


class LaunchRecord:
    """The state of one launch. Thread-safe: written by one thread, read by any."""

    def __init__(self, num_ranks, first_rank=0):
        self.first_rank = first_rank
        self.started_at = time.time()
        self.finished_at = None
        self._lock = threading.Lock()
        self._ranks = range(first_rank, first_rank + num_ranks)
        self._status = {rank: "starting" for rank in self._ranks}
        self._lines: dict[int, list[LogLine]] = {rank: [] for rank in self._ranks}
        self._results = {}
        self._failures = []
        self._metrics = []
        self._stopped = False
        self._finished = False

    @property
    def ranks(self):
        return list(self._ranks)

    def rank_status(self, rank):
        return self._status[rank]

    def set_rank_status(self, rank, status):
        with self._lock:
            self._status[rank] = status

    def add_output(self, rank, stream, text):
        with self._lock:
            self._lines[rank].append(LogLine(rank, stream, text, time.time()))

    def add_display(self, rank, bundle):
        """A rank displayed ``bundle``: its log keeps the text form (``display_text``)."""
        self.add_output(rank, "stdout", display_text(bundle))

    def lines(self, rank):
        with self._lock:
            return list(self._lines[rank])

    def add_metric(self, rank, metric, when):
        with self._lock:
            self._metrics.append({"rank": rank, "time": when, **metric})

    @property
    def metrics(self):
        with self._lock:
            return list(self._metrics)

    def add_result(self, rank, value):
        with self._lock:
            self._results[rank] = value
            self._status[rank] = "done"

    def add_failure(self, rank, exception, when):
        """Record that ``rank`` failed at ``when``; the earliest failure is the launch's cause."""
        with self._lock:
            self._failures.append((when, rank, exception, exception.__traceback__))
            self._status[rank] = "failed"

    def mark_stopped(self):
        """The user stopped the launch (interrupt or ``stop()``)."""
        self._stopped = True

    def finish(self):
        """No more events will come: ranks still starting or running were stopped."""
        with self._lock:
            for rank, status in self._status.items():
                if status in ("starting", "running"):
                    self._status[rank] = "stopped"
            self.finished_at = time.time()
            self._finished = True

    @property
    def finished(self):
        return self._finished

    @property
    def status(self):
        """ "running" until finished; then "failed", "stopped" or "succeeded"."""
        if not self._finished:
            return "running" if any(s != "starting" for s in self._status.values()) else "starting"
        if self._failures:
            return "failed"
        if self._stopped or len(self._results) < len(self._status):
            return "stopped"
        return "succeeded"

    @property
    def failure(self):
        """The exception of the first rank that failed (earliest in time), or None."""
        with self._lock:
            return min(self._failures, key=lambda item: (item[0], item[1]))[2] if self._failures else None

    @property
    def failure_traceback(self):
        """The traceback the first failure came with (the rank's frames), or None."""
        with self._lock:
            return min(self._failures, key=lambda item: (item[0], item[1]))[3] if self._failures else None

    @property
    def failed_rank(self):
        with self._lock:
            return min(self._failures, key=lambda item: (item[0], item[1]))[1] if self._failures else None

    @property
    def results(self):
        """Every rank's return value in rank order (None for a rank that returned nothing)."""
        with self._lock:
            return [self._results.get(rank) for rank in self._ranks]

    @property
    def elapsed(self):
        return (self.finished_at or time.time()) - self.started_at
