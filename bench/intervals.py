"""How far a benchmark's figure could move on a rerun: a 95% bootstrap interval.

On a shared 2-core machine one launch in ten takes a third longer than the median, so a figure
made of a few hundred launches is known only to within an interval, which the benchmarks print
beside it (``launch_overhead``'s ratio to raw fork, ``launch_versions``'s paired difference).

Example::

    low, high = bootstrap_interval(rounds, lambda sample: median(sample))
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any


def bootstrap_interval(
    items: Sequence[Any], statistic: Callable[[list[Any]], float], resamples: int = 2000
) -> tuple[float, float]:
    """The 2.5th and 97.5th percentiles of ``statistic`` over ``resamples`` resamples of ``items``
    (drawn with replacement, as many as there are; a fixed seed, so a report is reproducible)."""
    draw = random.Random(0)
    values = sorted(statistic(draw.choices(items, k=len(items))) for _ in range(resamples))
    return values[int(resamples * 0.025)], values[int(resamples * 0.975) - 1]
