"""Metric charts a person can judge a run from, drawn as SVG by hand.

Each chart has tick labels and grid lines on both axes, a log scale once a positive metric spans
two decades (a long run's loss is no longer a flat line after its first drop), TensorBoard's
smoothing (an exponential moving average with its start debiased) drawn over the faint raw line
once a series is long enough, one series per rank and per attempt (an earlier attempt dashed, so a
restart does not join into one line jumping back to step 0), and the latest value of each line of
the current attempt. Ranks that logged the same values share one line, named "all ranks".

The live widget draws inline SVG in the theme's colours (``currentColor``). The static form, which
saved, reopened, untrusted and exported notebooks show, draws each chart as an ``<img>`` of a whole
SVG document (sanitizers keep images, not inline SVG) on a white card of its own, as matplotlib's
figures are, so its numbers read on light and dark themes alike.

A charting library was weighed against these constraints: the charts must draw from core
ipywidgets (Colab, Kaggle, VS Code), in untrusted notebooks (no script, no stylesheet) and in
nbconvert's exports, so the chart has to be a picture made in the kernel. matplotlib makes one but
costs ~0.1 s a redraw of two 300-point lines (and 0.6 s to import) in the kernel, which redraws up
to ten times a second while a launch runs; a browser library (Vega, Plotly) needs a script that
untrusted notebooks and exports refuse. Hand SVG is ~200 lines and redraws that chart in ~2 ms.

Smoothing: ``NOTEBOOK_LAUNCHER_CHART_SMOOTHING`` (0 to 0.99; 0 turns it off; 0.6 by default).

Examples:
    >>> series = series_by_key([{"rank": 0, "step": s, "values": {"loss": 10.0 ** -s}} for s in range(4)])
    >>> html = metrics_html(series)
    >>> 'data-scale="log"' in html and ">0.001</text>" in html
    True
    >>> nice_ticks(0.0, 0.93)
    [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    >>> [tick_label(step) for step in nice_ticks(0, 12_400, whole=True)]
    ['0', '2.5k', '5k', '7.5k', '10k', '12.5k']
"""

from __future__ import annotations

import base64
import bisect
import html
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass

from ...telemetry import chart_order
from .palette import rank_line

__all__ = [
    "ChartSeries",
    "thinned",
    "series_by_key",
    "metrics_html",
    "nice_ticks",
    "tick_label",
    "smoothed",
    "default_smoothing",
    "SMOOTHING_ENV",
]

SMOOTHING_ENV = "NOTEBOOK_LAUNCHER_CHART_SMOOTHING"
DEFAULT_SMOOTHING = 0.6  # TensorBoard's
SMOOTH_FROM = 10  # points a series has before its smoothed line is drawn over the raw one
LOG_FROM = 100.0  # the ratio of a positive metric's largest to smallest value that turns on the log scale
MOST_POINTS = 1500  # points drawn of a line, at most (about; two a pixel of a narrower chart): longer is thinned
MARGINS = (52, 12, 8, 22)  # left, right, top, bottom: room for the tick labels


class ChartSeries(dict):
    """``{key: {(rank, attempt): [(x, value), ...]}}``; ``seconds``: the keys whose x is seconds
    since the launch started (the ranks' CPU and memory, sampled by the kernel), not steps."""

    seconds: set


def series_by_key(metrics: Iterable[dict], x: str = "step") -> ChartSeries:
    """The charts' series from ``Launch.metrics`` records (see ``ChartSeries``). With ``x="time"``
    every chart is drawn over the seconds since the first record, not over steps.

    Examples:
        >>> records = [{"rank": 0, "step": s, "time": 100.0 + 2 * s, "values": {"loss": 1.0}} for s in range(3)]
        >>> series_by_key(records, x="time")["loss"][(0, 0)]
        [(0.0, 1.0), (2.0, 1.0), (4.0, 1.0)]
    """
    metrics = list(metrics)
    series = ChartSeries()
    series.seconds = set()
    origin = min((record.get("time", 0.0) for record in metrics), default=0.0)
    for record in metrics:
        line = (record["rank"], record.get("attempt", 0))
        where = round(record.get("time", 0.0) - origin, 2) if x == "time" else record["step"]
        for key, value in record["values"].items():
            series.setdefault(key, {}).setdefault(line, []).append((where, value))
            if x == "time" or record.get("x") == "seconds":
                series.seconds.add(key)
    return series


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


def metrics_html(
    series: dict, width: int = 360, height: int = 190, as_image: bool = False, smoothing: float | None = None
) -> str:
    """One chart per metric; ``as_image`` for the static form (an ``<img>`` on a white card),
    otherwise inline SVG in the theme's colours (the live widget), where the pointer over a chart
    reads the values there (an SVG ``<title>``: no script). ``smoothing``: the weight of the
    smoothed line (0 to 0.99; None: ``NOTEBOOK_LAUNCHER_CHART_SMOOTHING`` or 0.6)."""
    if not series:
        return ""
    seconds: set = getattr(series, "seconds", set())
    weight = default_smoothing() if smoothing is None else min(max(smoothing, 0.0), 0.99)
    charts = [
        _chart_html(key, series[key], width, height, as_image, key in seconds, weight)
        for key in sorted(series, key=chart_order)
    ]
    return f'<div class="nl-metrics">{"".join(charts)}</div>'


@dataclass
class _Line:
    label: str
    color: str | None  # None: the theme's text colour (ranks that agree)
    dashed: bool  # an earlier attempt
    points: list  # finite (step, value) pairs


def _lines(series: dict, most: int = MOST_POINTS) -> list[_Line]:
    """The lines to draw: per attempt, one per rank, or one for all ranks where they agree."""
    attempts = sorted({attempt for _, attempt in series})
    lines = []
    for attempt in attempts:
        ranks = {rank: points for (rank, at), points in series.items() if at == attempt}
        shown = _distinct(ranks)
        together = len(shown) == 1 and len(ranks) > 1
        for rank, points in sorted(shown.items()):
            label = "all ranks" if together else f"rank {rank}"
            if len(attempts) > 1:
                label += f" · attempt {attempt}"
            finite = thinned([(s, v) for s, v in points if math.isfinite(v)], most)
            lines.append(_Line(label, None if together else rank_line(rank), attempt != attempts[-1], finite))
    return lines


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


def smoothed(values: list[float], weight: float) -> list[float]:
    """TensorBoard's smoothing: an exponential moving average, debiased at the start.

    Examples:
        >>> smoothed([1.0, 1.0, 1.0], 0.6)
        [1.0, 1.0, 1.0]
    """
    average, out = 0.0, []
    for count, value in enumerate(values, start=1):
        average = average * weight + (1 - weight) * value
        out.append(average / (1 - weight**count))
    return out


def default_smoothing() -> float:
    """The smoothing weight ``NOTEBOOK_LAUNCHER_CHART_SMOOTHING`` sets (0.6 by default), in 0 to 0.99."""
    try:
        weight = float(os.environ.get(SMOOTHING_ENV, DEFAULT_SMOOTHING))
    except ValueError:
        return DEFAULT_SMOOTHING
    return min(max(weight, 0.0), 0.99)


def _label(value: float) -> str:
    return f"{value:.3g}"


_THOUSANDS = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
CHAR_WIDTH = 6.0  # px a tick label's character takes at the charts' font size, at most (10 px sans-serif)


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
    return _label(value)


class _Axes:
    """Where values and steps fall in the plot, and the ticks of both axes."""

    def __init__(self, lines: list[_Line], width: int, height: int) -> None:
        left, right, top, bottom = MARGINS
        self.left, self.top = left, top
        self.plot_w, self.plot_h = width - left - right, height - top - bottom
        values = [v for line in lines for _, v in line.points] or [0.0]
        steps = [s for line in lines for s, _ in line.points] or [0]
        lo, hi = min(values), max(values)
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
        where = math.log10(value) if self.log else value
        return self.top + (1 - (where - self.y_lo) / ((self.y_hi - self.y_lo) or 1)) * self.plot_h


def _svg(
    lines: list[_Line], axes: _Axes, width: int, height: int, standalone: bool, weight: float, unit: str = "step"
) -> str:
    """The chart's SVG: grid, tick labels, lines (smoothed by ``weight``). ``standalone``: a whole
    document on a white card; otherwise the pointer reads the values under it (``_readout``)."""
    ink = "#333333" if standalone else "currentColor"
    bottom, right = axes.top + axes.plot_h, axes.left + axes.plot_w
    parts = [f'<rect width="{width}" height="{height}" rx="4" fill="#ffffff"/>'] if standalone else []
    parts.append(f'<g stroke="{ink}" stroke-opacity="0.14">')
    parts += [f'<line x1="{axes.left}" y1="{axes.y(v):.1f}" x2="{right}" y2="{axes.y(v):.1f}"/>' for v in axes.y_ticks]
    parts += [f'<line x1="{axes.x(s):.1f}" y1="{axes.top}" x2="{axes.x(s):.1f}" y2="{bottom}"/>' for s in axes.x_ticks]
    parts.append(f'</g><g fill="{ink}" font-size="10" font-family="sans-serif">')
    parts += [
        f'<text x="{axes.left - 4}" y="{axes.y(v) + 3.5:.1f}" text-anchor="end">{tick_label(v)}</text>'
        for v in axes.y_ticks
    ]
    for step in axes.x_ticks:
        label = tick_label(step)
        x = min(axes.x(step), width - 1 - CHAR_WIDTH * len(label) / 2)  # the last label inside the chart
        parts.append(f'<text x="{x:.1f}" y="{height - 6}" text-anchor="middle">{label}</text>')
    parts.append("</g>")
    for line in lines:
        color = line.color or ink
        dash = ' stroke-dasharray="4 3" stroke-opacity="0.7"' if line.dashed else ""
        if len(line.points) == 1:
            ((step, value),) = line.points
            x, y = axes.x(step), axes.y(value)
            parts.append(f'<circle class="nl-line" cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{color}"/>')
            continue
        steps = [s for s, _ in line.points]
        values = [v for _, v in line.points]
        smooth = weight > 0 and len(values) >= SMOOTH_FROM
        raw_style = ' stroke-opacity="0.3"' if smooth else dash
        parts.append(_polyline(axes, steps, values, color, "nl-line" + (" nl-raw" if smooth else ""), raw_style))
        if smooth:
            parts.append(_polyline(axes, steps, smoothed(values, weight), color, "nl-line nl-smoothed", dash))
    if not standalone:
        parts.append(_readout(lines, axes, unit))
    namespace = ' xmlns="http://www.w3.org/2000/svg"' if standalone else ""
    return f'<svg{namespace} width="{width}" height="{height}" role="img">{"".join(parts)}</svg>'


READOUT_BANDS = 48  # strips of a live chart, each naming the values nearest its middle when pointed at


def _readout(lines: list[_Line], axes: _Axes, unit: str) -> str:
    """Transparent strips over the plot, each with a ``<title>`` the browser shows under the pointer:
    the step (or second) of the point nearest the strip's middle and every line's value there."""
    drawn = [(line, [s for s, _ in line.points]) for line in lines if line.points]
    width = axes.plot_w / READOUT_BANDS
    reach = (axes.x_hi - axes.x_lo) / READOUT_BANDS  # how far past its ends a line is still read
    strips = []
    for band in range(READOUT_BANDS if drawn else 0):
        where = axes.x_lo + (band + 0.5) / READOUT_BANDS * (axes.x_hi - axes.x_lo)
        rows, at = [], None
        for line, xs in drawn:
            if not xs[0] - reach <= where <= xs[-1] + reach:
                continue
            index = min(bisect.bisect_left(xs, where), len(xs) - 1)
            if index and abs(xs[index - 1] - where) < abs(xs[index] - where):
                index -= 1
            at = xs[index] if at is None else at
            rows.append(f"{line.label}: {_label(line.points[index][1])}")
        if rows and at is not None:
            title = html.escape("\n".join([f"{unit} {tick_label(at)}", *rows]))
            strips.append(
                f'<rect class="nl-readout" x="{axes.left + band * width:.1f}" y="{axes.top}" width="{width:.1f}"'
                f' height="{axes.plot_h}" fill="#000000" fill-opacity="0"><title>{title}</title></rect>'
            )
    return "".join(strips)


def _polyline(axes: _Axes, steps: list, values: list, color: str, classes: str, style: str) -> str:
    coords = " ".join(f"{axes.x(s):.1f},{axes.y(v):.1f}" for s, v in zip(steps, values, strict=True))
    return f'<polyline class="{classes}" fill="none" stroke="{color}" stroke-width="1.6"{style} points="{coords}"/>'


def _legend(lines: list[_Line]) -> str:
    """The lines' colours, named, where there is more than one line. The swatches are text coloured
    by a style attribute (kept in an untrusted notebook); a line of the theme's colour has none."""
    if len(lines) < 2:
        return ""
    items = []
    for line in lines:
        swatch = "┅┅" if line.dashed else "━━"
        style = f' style="color:{line.color}"' if line.color else ""
        items.append(f"<span><span{style}>{swatch}</span> {html.escape(line.label)}</span>")
    return f'<div class="nl-legend">{" ".join(items)}</div>'


def _latest(lines: list[_Line]) -> str:
    current = [line for line in lines if not line.dashed and line.points]
    return ", ".join(f"{line.label}: {_label(line.points[-1][1])}" for line in current) or "no finite value"


def _chart_html(
    key: str, series: dict, width: int, height: int, as_image: bool, seconds: bool = False, weight: float = 0.0
) -> str:
    lines = _lines(series, min(MOST_POINTS, 2 * width))
    axes = _Axes(lines, width, height)
    title = html.escape(key)
    note = " (log scale)" if axes.log else " (constant)" if axes.constant else ""
    note += " · by second" if seconds else ""
    latest = html.escape(_latest(lines))
    if as_image:
        document = _svg(lines, axes, width, height, True, weight)
        source = "data:image/svg+xml;base64," + base64.b64encode(document.encode()).decode("ascii")
        values = [v for line in lines for _, v in line.points] or [0.0]
        steps = [s for line in lines for s, _ in line.points] or [0]
        ranges = (
            f"{key} from {_label(min(values))} to {_label(max(values))},"
            f" {'seconds' if seconds else 'steps'} {min(steps)} to {max(steps)}"
        )
        picture = (
            f'<img class="nl-chart-image" src="{source}" width="{width}" height="{height}"'
            f' alt="{html.escape(ranges)}; latest {latest}"/>'
        )
    else:
        picture = _svg(lines, axes, width, height, False, weight, "second" if seconds else "step")
    scale = "log" if axes.log else "linear"
    return (
        f'<div class="nl-chart" data-key="{title}" data-scale="{scale}"><div><b>{title}</b>{note}</div>'
        f"{picture}{_legend(lines)}<div>latest {title}: {latest}</div></div>"
    )
