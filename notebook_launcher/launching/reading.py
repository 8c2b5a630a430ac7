"""What a launch has produced so far, read from its ``LaunchRecord``: statuses, results, the
failure, metrics and each rank's log. ``Launch`` is one; a front end needs nothing more to show it.

Examples:
    >>> from notebook_launcher import launch
    >>> job = launch(lambda: print("epoch 0"), num_processes=2, display="none")
    >>> job.wait(); job.status, job.ranks, job.line_count(1)
    ('succeeded', [0, 1], 1)
"""

from __future__ import annotations

from typing import Any

from .record import LaunchRecord

__all__ = ["LaunchReading"]


class LaunchReading:
    """The read side of a launch over its record (``self._record``)."""

    _record: LaunchRecord

    @property
    def record(self) -> LaunchRecord:
        """What the launch has produced so far (a ``LaunchRecord``), for readers that show part of it."""
        return self._record

    @property
    def status(self) -> str:
        """ "starting", "running", "succeeded", "failed" or "stopped"."""
        return self._record.status

    def rank_status(self, rank: int) -> str:
        """ "starting", "running", "done", "failed" or "stopped" for one rank."""
        return self._record.rank_status(rank)

    @property
    def ranks(self) -> list[int]:
        """The global ranks this kernel runs."""
        return self._record.ranks

    @property
    def stragglers(self) -> dict[int, str]:
        """The ranks that lag the others in this attempt (work time per step 20 % over the median of
        the others', three reports running), each with why; {} when none does."""
        return dict(self._record.stragglers)

    @property
    def results(self) -> list[Any]:
        """Every rank's return value, in rank order (None where a rank returned nothing)."""
        return self._record.results

    @property
    def exception(self) -> BaseException | None:
        """The first failing rank's exception, or None."""
        return self._record.failure

    @property
    def failed_rank(self) -> int | None:
        """The rank whose failure ended the launch, or None."""
        return self._record.failed_rank

    @property
    def metrics(self) -> list[dict]:
        """Everything the ranks logged (``accelerator.log``), as dicts with rank, time, step and values."""
        return self._record.metrics

    @property
    def elapsed(self) -> float:
        """Seconds since the launch started (until it finished, once it has)."""
        return self._record.elapsed

    def lines(self, rank: int, start: int = 0, stop: int | None = None) -> list[Any]:
        """Rank ``rank``'s log as ``LogLine`` entries (stream, text, time; a display's mime bundle), in
        the order they came; entries ``start`` to ``stop`` (by default, to the end)."""
        return self._record.lines(rank, start, stop)

    def line(self, rank: int, index: int) -> Any:
        """Entry ``index`` of rank ``rank``'s log."""
        return self._record.lines(rank, index)[0]

    def line_count(self, rank: int) -> int:
        """How many entries rank ``rank``'s log has."""
        return self._record.line_count(rank)

    def interleaved(self, last: int | None = None) -> list[Any]:
        """Every rank's log entries in the order they came (with ``last``, each rank's last ``last``)."""
        return self._record.interleaved(last)

    @property
    def failure_traceback(self) -> Any:
        """The failing rank's frames, as a traceback (None without a failure)."""
        return self._record.failure_traceback

    def logs(self, rank: int, stream: str | None = None) -> str:
        """Rank ``rank``'s whole output as text; ``stream`` "stdout" or "stderr" keeps only that one.

        Examples:
            >>> from notebook_launcher import launch
            >>> job = launch(lambda: print("epoch 0: loss 0.31"), num_processes=1, display="none")
            >>> job.wait(); job.logs(0)
            'epoch 0: loss 0.31\\n'
        """
        return self._record.text(rank, stream)
