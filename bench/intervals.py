"""How far a benchmark's figure could move on a rerun: a 95% bootstrap interval.

On a shared 2-core machine one launch in ten takes a third longer than the median, so a figure
made of a few hundred launches is known only to within an interval, which the benchmarks print
beside it (``launch_overhead``'s ratio to raw fork, ``launch_versions``'s paired difference).

Example::

    low, high = bootstrap_interval(rounds, lambda sample: median(sample))
    print(verdict((low, high), 1.2))   # "met" only when the whole interval is within 1.2
    print(decided(*ratio_of_medians(ours, theirs), 1.03))   # "1.01x (95% interval 0.99-1.02x) -> met"

Every benchmark that states a target decides it this way (``decided``), from interleaved rounds.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from statistics import median
from typing import Any


def bootstrap_interval(
    items: Sequence[Any], statistic: Callable[[list[Any]], float], resamples: int = 2000
) -> tuple[float, float]:
    """The 2.5th and 97.5th percentiles of ``statistic`` over ``resamples`` resamples of ``items``
    (drawn with replacement, as many as there are; a fixed seed, so a report is reproducible)."""
    draw = random.Random(0)
    values = sorted(statistic(draw.choices(items, k=len(items))) for _ in range(resamples))
    return values[int(resamples * 0.025)], values[int(resamples * 0.975) - 1]


def verdict(interval: tuple[float, float], target: float) -> str:
    """Whether a figure known only to within ``interval`` is at most ``target``: "met" when the whole
    interval is, "NOT met" when none of it is, and otherwise that the rounds cannot tell.

    Examples:
        >>> verdict((1.13, 1.19), 1.2), verdict((1.21, 1.3), 1.2)
        ('met', 'NOT met')
        >>> verdict((1.15, 1.24), 1.2)
        'not decided: the 95% interval holds the target (run more rounds)'
    """
    lowest, highest = interval
    if highest <= target:
        return "met"
    if lowest > target:
        return "NOT met"
    return "not decided: the 95% interval holds the target (run more rounds)"


def ratio_of_medians(runs: Sequence[float], floor: Sequence[float]) -> tuple[float, tuple[float, float]]:
    """``median(runs) / median(floor)`` of paired rounds (one of each per round), with its 95%
    interval (rounds resampled whole).

    Examples:
        >>> ratio_of_medians([2.0, 2.0, 2.0], [1.0, 1.0, 1.0])
        (2.0, (2.0, 2.0))
    """
    pairs = list(zip(runs, floor, strict=True))
    interval = bootstrap_interval(pairs, lambda sample: median(a for a, _ in sample) / median(b for _, b in sample))
    return median(runs) / median(floor), interval


def median_of(samples: Sequence[float]) -> tuple[float, tuple[float, float]]:
    """The median of ``samples`` (one per round) and its 95% interval."""
    return median(samples), bootstrap_interval(list(samples), median)


def decided(figure: float, interval: tuple[float, float], target: float, unit: str = "x", scale: float = 1.0) -> str:
    """ "figure (95% interval low-high) -> verdict" for a figure that should be at most ``target``
    (all in the same unit; ``scale`` multiplies them for printing, e.g. 1000 for seconds as ms).

    Examples:
        >>> decided(0.31, (0.29, 0.33), 0.5, "ms", scale=1000)
        '310ms (95% interval 290-330ms) -> met'
    """
    low, high = interval
    shown = f"{figure * scale:.3g}{unit} (95% interval {low * scale:.3g}-{high * scale:.3g}{unit})"
    return f"{shown} -> {verdict(interval, target)}"
