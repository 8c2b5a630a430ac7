"""Metric charts a person can judge a run from, drawn as SVG by hand.

Each chart has tick labels and grid lines on both axes, a log scale once a positive metric spans
two decades (a long run's loss is no longer a flat line after its first drop), TensorBoard's
smoothing (an exponential moving average with its start debiased) drawn over the faint raw line
once a series is long enough, one series per rank and per attempt (an earlier attempt dashed, so a
restart does not join into one line jumping back to step 0), and the latest value of each line of
the current attempt. Ranks that logged the same values share one line, named "all ranks"; ranks
that differ get their mean drawn heavier over their own lines (``chart_lines.py``). Outliers are
left out of the scale on request (``chart_axes.py``).

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
Outliers: ``NOTEBOOK_LAUNCHER_CHART_CLIP`` (off by default; the live widget has a box for it).

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
import os
from collections.abc import Iterable

from ...telemetry import chart_order
from .chart_axes import CHAR_WIDTH, Axes, clipping, nice_ticks, tick_label, value_label
from .chart_lines import MOST_POINTS, Line, lines_of, thinned

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


def metrics_html(
    series: dict,
    width: int = 360,
    height: int = 190,
    as_image: bool = False,
    smoothing: float | None = None,
    clip: bool | None = None,
) -> str:
    """One chart per metric; ``as_image`` for the static form (an ``<img>`` on a white card),
    otherwise inline SVG in the theme's colours (the live widget), where the pointer over a chart
    reads the values there (an SVG ``<title>``: no script). ``smoothing``: the weight of the
    smoothed line (0 to 0.99; None: ``NOTEBOOK_LAUNCHER_CHART_SMOOTHING`` or 0.6). ``clip``: leave
    outliers out of each chart's scale (None: ``NOTEBOOK_LAUNCHER_CHART_CLIP``, off by default)."""
    if not series:
        return ""
    seconds: set = getattr(series, "seconds", set())
    weight = default_smoothing() if smoothing is None else min(max(smoothing, 0.0), 0.99)
    clip = clipping() if clip is None else clip
    charts = [
        _chart_html(key, series[key], width, height, as_image, key in seconds, weight, clip)
        for key in sorted(series, key=chart_order)
    ]
    return f'<div class="nl-metrics">{"".join(charts)}</div>'


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


def _svg(
    lines: list[Line],
    axes: Axes,
    width: int,
    height: int,
    standalone: bool,
    weight: float,
    unit: str = "step",
    described: str = "",
) -> str:
    """The chart's SVG: grid, tick labels, lines (smoothed by ``weight``). ``standalone``: a whole
    document on a white card; otherwise the pointer reads the values under it (``_readout``).
    ``described``: what a screen reader says of the picture (its ranges and latest values)."""
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
        stroke = 2.6 if line.mean else 1.6
        kind = "nl-line nl-mean" if line.mean else "nl-line"
        parts.append(_polyline(axes, steps, values, color, kind + (" nl-raw" if smooth else ""), raw_style, stroke))
        if smooth:
            parts.append(_polyline(axes, steps, smoothed(values, weight), color, kind + " nl-smoothed", dash, stroke))
    if not standalone:
        parts.append(_readout(lines, axes, unit))
    namespace = ' xmlns="http://www.w3.org/2000/svg"' if standalone else ""
    name = f' aria-label="{html.escape(described)}"' if described else ""
    return f'<svg{namespace} width="{width}" height="{height}" role="img"{name}>{"".join(parts)}</svg>'


READOUT_BANDS = 48  # strips of a live chart, each naming the values nearest its middle when pointed at


def _readout(lines: list[Line], axes: Axes, unit: str) -> str:
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
            rows.append(f"{line.label}: {value_label(line.points[index][1])}")
        if rows and at is not None:
            title = html.escape("\n".join([f"{unit} {tick_label(at)}", *rows]))
            strips.append(
                f'<rect class="nl-readout" x="{axes.left + band * width:.1f}" y="{axes.top}" width="{width:.1f}"'
                f' height="{axes.plot_h}" fill="#000000" fill-opacity="0"><title>{title}</title></rect>'
            )
    return "".join(strips)


def _polyline(axes: Axes, steps: list, values: list, color: str, classes: str, style: str, stroke: float = 1.6) -> str:
    coords = " ".join(f"{axes.x(s):.1f},{axes.y(v):.1f}" for s, v in zip(steps, values, strict=True))
    return (
        f'<polyline class="{classes}" fill="none" stroke="{color}" stroke-width="{stroke}"{style} points="{coords}"/>'
    )


def _legend(lines: list[Line]) -> str:
    """The lines' colours, named, where there is more than one line. The swatches are text coloured
    by a style attribute (kept in an untrusted notebook); a line of the theme's colour has none."""
    if len(lines) < 2:
        return ""
    items = []
    for line in lines:
        swatch = "┅┅" if line.dashed else "▬▬" if line.mean else "━━"
        style = f' style="color:{line.color}"' if line.color else ""
        items.append(f"<span><span{style}>{swatch}</span> {html.escape(line.label)}</span>")
    return f'<div class="nl-legend">{" ".join(items)}</div>'


def _latest(lines: list[Line]) -> str:
    current = [line for line in lines if not line.dashed and line.points]
    return ", ".join(f"{line.label}: {value_label(line.points[-1][1])}" for line in current) or "no finite value"


def _described(key: str, lines: list[Line], seconds: bool) -> str:
    """The chart in words, for whoever cannot see it (an image's alt, an SVG's label): its ranges
    and the latest value of each line."""
    values = [v for line in lines for _, v in line.points] or [0.0]
    steps = [s for line in lines for s, _ in line.points] or [0]
    return (
        f"{key} from {value_label(min(values))} to {value_label(max(values))},"
        f" {'seconds' if seconds else 'steps'} {min(steps)} to {max(steps)}; latest {_latest(lines)}"
    )


def _chart_html(
    key: str,
    series: dict,
    width: int,
    height: int,
    as_image: bool,
    seconds: bool = False,
    weight: float = 0.0,
    clip: bool = False,
) -> str:
    lines = lines_of(series, min(MOST_POINTS, 2 * width))
    axes = Axes([line.points for line in lines], width, height, clip)
    title = html.escape(key)
    note = " (log scale)" if axes.log else " (constant)" if axes.constant else ""
    note += " · outliers clipped" if axes.clipped else ""
    note += " · by second" if seconds else ""
    latest = html.escape(_latest(lines))
    described = _described(key, lines, seconds)
    if as_image:
        document = _svg(lines, axes, width, height, True, weight)
        source = "data:image/svg+xml;base64," + base64.b64encode(document.encode()).decode("ascii")
        picture = (
            f'<img class="nl-chart-image" src="{source}" width="{width}" height="{height}"'
            f' alt="{html.escape(described)}"/>'
        )
    else:
        picture = _svg(lines, axes, width, height, False, weight, "second" if seconds else "step", described)
    scale = "log" if axes.log else "linear"
    return (
        # as wide as its picture: a long legend or "latest" line of many ranks wraps under it, not
        # widening the chart until the next one is pushed onto a row of its own
        f'<div class="nl-chart" data-key="{title}" data-scale="{scale}" style="width: {width}px; max-width: 100%">'
        f"<div><b>{title}</b>{note}</div>"
        f"{picture}{_legend(lines)}<div>latest {title}: {latest}</div></div>"
    )
