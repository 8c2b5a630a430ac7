"""Where a chart's values and steps fall, and the numbers on its axes.

The y axis turns to a log scale once a positive metric spans two decades (a long run's loss is no
longer a flat line after its first drop). With outliers clipped (on request: the live widget's
"clip outliers" box or ``NOTEBOOK_LAUNCHER_CHART_CLIP=on``), the y range is set by the 2nd to
98th percentile of the values, as TensorBoard's "ignore outliers" does, and a value beyond it is
drawn at the edge, so one spike (a NaN-adjacent loss, a first slow step) no longer flattens the
rest of the run.

Examples:
    >>> nice_ticks(0.0, 0.93)
    [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    >>> [tick_label(step) for step in nice_ticks(0, 12_400, whole=True)]
    ['0', '2.5k', '5k', '7.5k', '10k', '12.5k']
    >>> spike = [(s, 1.0 + 0.01 * s) for s in range(99)] + [(99, 1000.0)]
    >>> Axes([spike], 360, 190).y_ticks[-1], Axes([spike], 360, 190, clip=True).y_ticks[-1]
    (1000.0, 2.0)
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

from ...choices import switched_on

__all__ = ["Axes", "nice_ticks", "tick_label", "value_label", "clipping", "CLIP_ENV", "CHAR_WIDTH", "MARGINS"]

CLIP_ENV = "NOTEBOOK_LAUNCHER_CHART_CLIP"
LOG_FROM = 100.0  # the ratio of a positive metric's largest to smallest value that turns on the log scale
CLIP_QUANTILES = (0.02, 0.98)  # the share of values below and above which clipping leaves out of the scale
CLIP_FROM = 20  # values a chart has before clipping leaves any out (a short series has no outliers to tell)
MARGINS = (52, 12, 8, 22)  # left, right, top, bottom: room for the tick labels
CHAR_WIDTH = 6.0  # px a tick label's character takes at the charts' font size, at most (10 px sans-serif)
_THOUSANDS = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def clipping(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether charts clip outliers unless told otherwise: ``NOTEBOOK_LAUNCHER_CHART_CLIP`` on (off by default).

    Examples:
        >>> clipping({}), clipping({CLIP_ENV: "on"})
        (False, True)
    """
    return switched_on(CLIP_ENV, environ, default=False)


def nice_ticks(low: float, high: float, count: int = 5, whole: bool = False) -> list[float]:
    """Round tick values (1, 2, 2.5 or 5 times a power of ten apart) covering ``low`` to ``high``."""
    if high <= low:
        spread = abs(low) * 0.1 or 1.0
        low, high = low - spread, high + spread
    raw = (high - low) / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    if whole:
        step = max(1.0, round(step))
    first = math.floor(low / step + 1e-9) * step
    last = math.ceil(high / step - 1e-9) * step
    return [round(first + i * step, 12) + 0.0 for i in range(round((last - first) / step) + 1)]


def value_label(value: float) -> str:
    """A value as the charts print it: three significant digits.

    Examples:
        >>> value_label(0.062512), value_label(1234.5)
        ('0.0625', '1.23e+03')
    """
    return f"{value:.3g}"


def tick_label(value: float) -> str:
    """A tick's number as people write it on an axis: 1k, 2.5k, 1.2M for thousands and up (never
    "1e+03"), else three significant digits.

    Examples:
        >>> [tick_label(v) for v in (0, 0.25, 300, 1000, 2500, 12_500, 1_500_000, -2000, 1e-5)]
        ['0', '0.25', '300', '1k', '2.5k', '12.5k', '1.5M', '-2k', '1e-05']
    """
    for size, suffix in _THOUSANDS:
        if abs(value) >= size:
            return f"{value / size:.3g}{suffix}"
    return value_label(value)


def _quantile(ordered: list[float], share: float) -> float:
    return ordered[min(len(ordered) - 1, max(0, round(share * (len(ordered) - 1))))]


class Axes:
    """Where values and steps fall in the plot, and the ticks of both axes, for ``lines`` (each a
    list of finite ``(step, value)`` points). ``clip``: leave outliers out of the y range
    (``clipped`` then says whether any value was)."""

    def __init__(self, lines: list[list], width: int, height: int, clip: bool = False) -> None:
        left, right, top, bottom = MARGINS
        self.left, self.top = left, top
        self.plot_w, self.plot_h = width - left - right, height - top - bottom
        values = [v for points in lines for _, v in points] or [0.0]
        steps = [s for points in lines for s, _ in points] or [0]
        whole = lo, hi = min(values), max(values)
        if clip and len(values) >= CLIP_FROM:
            ordered = sorted(values)
            lo, hi = (_quantile(ordered, share) for share in CLIP_QUANTILES)
        self.clipped = (lo, hi) != whole
        self.constant = lo == hi
        self.log = lo > 0 and hi / lo >= LOG_FROM
        if self.log:
            first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
            every = max(1, math.ceil((last - first) / 6))
            self.y_ticks = [10.0**e for e in range(first, last + 1, every)]
            self.y_lo, self.y_hi = math.log10(self.y_ticks[0]), math.log10(self.y_ticks[-1])
        else:
            self.y_ticks = nice_ticks(lo, hi, count=5)
            self.y_lo, self.y_hi = self.y_ticks[0], self.y_ticks[-1]
        self.x_ticks = nice_ticks(min(steps), max(steps), count=5, whole=True)
        self.x_lo, self.x_hi = self.x_ticks[0], self.x_ticks[-1]

    def x(self, step: float) -> float:
        return self.left + (step - self.x_lo) / ((self.x_hi - self.x_lo) or 1) * self.plot_w

    def y(self, value: float) -> float:
        """The value's height in the plot; a value beyond the range (clipped) at its edge."""
        where = (math.log10(value) if value > 0 else self.y_lo) if self.log else value
        where = min(max(where, self.y_lo), self.y_hi)
        return self.top + (1 - (where - self.y_lo) / ((self.y_hi - self.y_lo) or 1)) * self.plot_h
