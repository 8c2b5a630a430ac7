"""The lines a chart draws from one metric's series: one per rank and per attempt (an earlier
attempt dashed, so a restart does not join into one line jumping back to step 0), one named "all
ranks" where the ranks logged the same values, and the ranks' mean where they differ.

The mean is taken over the steps every rank logged (a rank a step ahead adds none), and only where
those are at least half of each rank's points: ranks that log at different steps (or a chart over
wall time, where no two ranks share an x) get no mean rather than a made-up one.

Examples:
    >>> drawn = lines_of({(0, 0): [(0, 1.0), (1, 3.0)], (1, 0): [(0, 3.0), (1, 5.0)]})
    >>> [(line.label, line.points) for line in drawn]
    [('rank 0', [(0, 1.0), (1, 3.0)]), ('rank 1', [(0, 3.0), (1, 5.0)]), ('mean', [(0, 2.0), (1, 4.0)])]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .palette import rank_line

__all__ = ["Line", "lines_of", "thinned", "MOST_POINTS"]

MOST_POINTS = 1500  # points drawn of a line, at most (about; two a pixel of a narrower chart): longer is thinned


@dataclass
class Line:
    label: str
    color: str | None  # None: the theme's text colour (ranks that agree, or their mean)
    dashed: bool  # an earlier attempt
    points: list  # finite (step, value) pairs
    mean: bool = False  # the ranks' mean, drawn heavier over their own lines


def thinned(points: list, most: int) -> list:
    """At most about ``most`` of ``points``, evenly spaced, the last one kept: a long run's chart draws
    as fast as a short one's (``Launch.metrics`` keeps every value).

    Examples:
        >>> len(thinned(list(range(10_000)), 1500)), thinned(list(range(10)), 4)
        (1430, [0, 3, 6, 9])
    """
    if len(points) <= most:
        return points
    every = math.ceil(len(points) / most)
    kept = points[::every]
    return kept if kept[-1] is points[-1] else [*kept, points[-1]]


def lines_of(series: dict, most: int = MOST_POINTS) -> list[Line]:
    """The lines to draw of ``{(rank, attempt): [(x, value), ...]}``: per attempt, one per rank, or
    one for all ranks where they agree; then the mean of the current attempt's ranks, where they
    differ and share their steps. Non-finite values are left out; each line is thinned to ``most``."""
    attempts = sorted({attempt for _, attempt in series})
    finite = {line: [(s, v) for s, v in points if math.isfinite(v)] for line, points in series.items()}
    lines = []
    ranks: dict = {}
    shown: dict = {}
    for attempt in attempts:  # after it, ranks and shown are the current attempt's
        ranks = {rank: points for (rank, at), points in finite.items() if at == attempt}
        shown = _distinct(ranks)
        together = len(shown) == 1 and len(ranks) > 1
        for rank, points in sorted(shown.items()):
            label = "all ranks" if together else f"rank {rank}"
            if len(attempts) > 1:
                label += f" · attempt {attempt}"
            color = None if together else rank_line(rank)
            lines.append(Line(label, color, attempt != attempts[-1], thinned(points, most)))
    average = _mean(ranks) if len(shown) > 1 else []
    if average:
        lines.append(Line("mean", None, False, thinned(average, most), mean=True))
    return lines


def _mean(ranks: dict) -> list:
    """The ranks' mean at each step every rank logged, when those are at least half of each rank's
    points; else nothing.

    Examples:
        >>> _mean({0: [(0, 1.0), (2, 3.0)], 1: [(0, 3.0), (1, 9.0), (2, 5.0)]})
        [(0, 2.0), (2, 4.0)]
        >>> _mean({0: [(0.31, 1.0), (1.3, 2.0)], 1: [(0.52, 3.0), (1.5, 4.0)]})  # no step in common
        []
        >>> _mean({0: [(0.0, 1.0), (0.0, 2.0)], 1: [(0.0, 3.0), (0.0, 4.0)]})  # one x, many values
        []
    """
    if len(ranks) < 2 or not all(ranks.values()):
        return []
    by_step = [dict(points) for points in ranks.values()]
    if any(len(values) < len(points) for values, points in zip(by_step, ranks.values(), strict=True)):
        return []  # several values at one x (steps logged within one rounded second): no one value to average
    common = sorted(set.intersection(*(set(values) for values in by_step)))
    if any(len(common) * 2 < len(values) for values in by_step):
        return []
    return [(step, sum(values[step] for values in by_step) / len(by_step)) for step in common]


def _distinct(ranks: dict) -> dict:
    """Ranks whose series differ; one line suffices when every rank logged the same values.

    Compared over the steps every rank has logged: a rank a step ahead of the others is not a
    difference, or a live chart would gain and lose lines at every step. The longest is kept.

    Examples:
        >>> sorted(_distinct({0: [(0, 1.0), (1, 2.0)], 1: [(0, 1.0)]}))
        [0]
        >>> sorted(_distinct({0: [(0, 1.0)], 1: [(0, 3.0)]}))
        [0, 1]
    """
    common = min(len(points) for points in ranks.values())
    first = next(iter(ranks.values()))[:common]
    if any(points[:common] != first for points in ranks.values()):
        return ranks
    longest = max(sorted(ranks), key=lambda rank: len(ranks[rank]))
    return {longest: ranks[longest]}
