"""HTML for the launch widget, as pure functions of the launch's state (tested without a kernel).

Everything is plain HTML and inline SVG inside core ``ipywidgets.HTML``, so it renders wherever
ipywidgets do (JupyterLab, Notebook 7, Colab, Kaggle, VS Code) with no front-end code. A log box
uses ``flex-direction: column-reverse``, which keeps it scrolled to the newest line by CSS alone.

Example:
    >>> "done" in status_chips({0: "done", 1: "running"})
    True
"""

from __future__ import annotations

import html
import math

__all__ = ["status_chips", "log_html", "metrics_html", "series_by_key"]

COLORS = {"starting": "#9e9e9e", "running": "#1e88e5", "done": "#43a047", "failed": "#e53935", "stopped": "#fb8c00"}
LINE_COLORS = ("#1e88e5", "#e53935", "#43a047", "#8e24aa", "#fb8c00", "#00acc1", "#6d4c41", "#3949ab")


def status_chips(statuses):
    """One coloured chip per rank: ``rank 0: running``."""
    chips = []
    for rank, status in sorted(statuses.items()):
        color = COLORS.get(status, "#9e9e9e")
        chips.append(
            f'<span class="nl-chip nl-{status}" style="display:inline-block;margin:0 4px 2px 0;'
            f'padding:1px 8px;border-radius:10px;color:white;background:{color};font-size:12px">'
            f"rank {rank}: {status}</span>"
        )
    return "".join(chips)


def log_html(lines, live="", hidden=0, height=260):
    """A rank's log box: ``lines`` are (stream, text); stderr in red; ``live`` is a line being drawn."""
    parts = []
    if hidden:
        parts.append(f'<span style="color:#888">… {hidden} earlier lines (full log: launch.logs(rank))</span>\n')
    for stream, text in lines:
        escaped = html.escape(text)
        if stream == "stderr":
            parts.append(f'<span class="nl-stderr" style="color:#c62828;background:#fdecea">{escaped}</span>')
        else:
            parts.append(escaped)
    if live:
        parts.append(f'<span class="nl-live" style="color:#555">{html.escape(live)}</span>\n')
    body = "".join(parts) or '<span style="color:#888">(no output yet)</span>'
    return (
        f'<div class="nl-log" style="max-height:{height}px;overflow:auto;display:flex;'
        f'flex-direction:column-reverse;border:1px solid #ddd;padding:4px">'
        f'<pre style="flex:none;margin:0;white-space:pre-wrap;font-size:12px;line-height:1.3">{body}</pre></div>'
    )


def series_by_key(metrics):
    """{key: {rank: [(step, value), ...]}} from ``Launch.metrics`` records."""
    series: dict = {}
    for record in metrics:
        for key, value in record["values"].items():
            series.setdefault(key, {}).setdefault(record["rank"], []).append((record["step"], value))
    return series


def metrics_html(series, width=300, height=130):
    """One small SVG line chart per metric (one line per rank where ranks differ) and the latest values."""
    if not series:
        return '<span style="color:#888">no metrics yet — call accelerator.log({...}) in the function</span>'
    charts = [_chart(key, ranks, width, height) for key, ranks in sorted(series.items())]
    return f'<div class="nl-metrics" style="display:flex;flex-wrap:wrap;gap:8px">{"".join(charts)}</div>'


def _distinct(ranks):
    """Ranks whose series differ; one line suffices when every rank logged the same values."""
    first = next(iter(ranks.values()))
    return ranks if any(points != first for points in ranks.values()) else {min(ranks): first}


def _chart(key, ranks, width, height):
    shown = _distinct(ranks)
    points = [p for series in shown.values() for p in series]
    steps = [s for s, _ in points]
    values = [v for _, v in points if math.isfinite(v)]
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    if hi == lo:
        hi, lo = hi + 0.5, lo - 0.5
    s_lo, s_hi = min(steps), max(steps)
    s_span = (s_hi - s_lo) or 1
    pad = 6

    def xy(step, value):
        x = pad + (step - s_lo) / s_span * (width - 2 * pad)
        y = height - pad - (value - lo) / (hi - lo) * (height - 2 * pad - 14)
        return f"{x:.1f},{y:.1f}"

    lines = []
    for i, (rank, series) in enumerate(sorted(shown.items())):
        color = LINE_COLORS[i % len(LINE_COLORS)]
        coords = " ".join(xy(s, v) for s, v in series if math.isfinite(v))
        lines.append(
            f'<polyline class="nl-line" data-rank="{rank}" fill="none" stroke="{color}" '
            f'stroke-width="1.5" points="{coords}"/>'
        )
    latest = ", ".join(f"rank {rank}: {series[-1][1]:.4g}" for rank, series in sorted(shown.items()))
    title = html.escape(key)
    return (
        f'<div class="nl-chart" data-key="{title}" style="font-size:12px">'
        f'<svg width="{width}" height="{height}" style="border:1px solid #ddd;background:white">'
        f'<text x="{pad}" y="12" font-size="11" fill="#333">{title}</text>'
        f'<text x="{width - pad}" y="12" font-size="10" fill="#888" text-anchor="end">{hi:.3g} … {lo:.3g}</text>'
        f"{''.join(lines)}</svg><div>latest {title}: {html.escape(latest)}</div></div>"
    )
