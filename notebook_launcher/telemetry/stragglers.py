"""Which ranks lag: a rank whose work time per step (``trainer_core.throughput``: the step less the
time where synchronised ranks wait for each other) stays ``RATIO`` times the median of the others'
or more, ``SUSTAINED`` reports in a row (about a second apart), is a straggler until a report of its own
is back under that line. Pure rules over the work times the ranks report, tested alone.

Examples:
    >>> watch = Stragglers()
    >>> for _ in range(SUSTAINED):
    ...     for rank, ms in ((0, 100.0), (1, 101.0), (2, 250.0)):
    ...         changed = watch.report(rank, ms)
    >>> changed, watch.flagged
    (True, {2: 'work time 250 ms, 2.5× the median of the other ranks (100 ms)'})
    >>> watch.report(2, 105.0), watch.flagged
    (True, {})
"""

from __future__ import annotations

import statistics

__all__ = ["Stragglers", "RATIO", "SUSTAINED"]

RATIO = 1.2  # a work time this many times the median of the other ranks' is slow
SUSTAINED = 3  # reports in a row that must be slow before a rank is flagged (one slow step is noise)


class Stragglers:
    """Work times by rank in, ``flagged`` (rank → why) out."""

    def __init__(self, ratio: float = RATIO, sustained: int = SUSTAINED) -> None:
        self._ratio = ratio
        self._sustained = sustained
        self._latest: dict[int, float] = {}
        self._streak: dict[int, int] = {}
        self.flagged: dict[int, str] = {}

    def report(self, rank: int, ms: float) -> bool:
        """``rank`` reported a step's work time of ``ms``; True when ``flagged`` changed."""
        self._latest[rank] = ms
        others = [ms for other, ms in self._latest.items() if other != rank]
        median = statistics.median(others) if others else None
        slow = median is not None and median > 0 and ms >= self._ratio * median
        self._streak[rank] = self._streak.get(rank, 0) + 1 if slow else 0
        before = self.flagged.get(rank)
        if slow and self._streak[rank] >= self._sustained:
            assert median is not None
            self.flagged[rank] = (
                f"work time {ms:.0f} ms, {ms / median:.1f}× the median of the other ranks ({median:.0f} ms)"
            )
        elif not slow:
            self.flagged.pop(rank, None)
        return (rank in self.flagged) != (before is not None)
