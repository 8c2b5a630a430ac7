"""HTML for a launch, as pure functions of its state (tested without a kernel).

Shared by the live widget and the static form a saved notebook keeps. Everything is plain HTML,
CSS and inline SVG, so it renders wherever HTML does: JupyterLab, Notebook 7, Colab, Kaggle,
VS Code, nbconvert, GitHub and nbviewer. Colours come from JupyterLab's theme variables (with
fallbacks elsewhere) and SVG text uses ``currentColor``, so dark themes read as well as light ones.

A saved notebook someone else opens is untrusted: JupyterLab then strips ``<style>`` and ``<svg>``
(keeping the SVG's text, run together). So the static form draws each chart as an ``<img>`` of an
SVG document (images survive the sanitizer) holding only lines and axes, in colours that read on
light and dark backgrounds, and writes its labels as HTML text, which takes the theme's colour.

Examples:
    >>> "rank 1: running" in status_chips({0: "done", 1: "running"})
    True
"""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Iterable, Sequence
from typing import Any

from ...wire.mime import as_text
from .ansi import ansi_html

__all__ = [
    "CSS",
    "status_chips",
    "rank_color",
    "entries_html",
    "metrics_html",
    "series_by_key",
    "traceback_html",
    "legend_html",
]

STATUS_COLORS = {
    "starting": "#8a8a8a",
    "running": "#1e88e5",
    "done": "#2e7d32",
    "failed": "#d32f2f",
    "stopped": "#ef6c00",
}
# distinct on light and dark backgrounds (matplotlib's tab10 without its grey and olive)
RANK_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")

CSS = """
.nl-root { color: var(--jp-ui-font-color1, inherit); font-size: 12px; }
.nl-root .nl-head { margin: 2px 0 4px; }
.nl-root .nl-places { color: var(--jp-ui-font-color2, #666); margin: 0 0 4px; }
.nl-root .nl-chip { display: inline-block; margin: 0 4px 2px 0; padding: 1px 8px; border-radius: 10px; color: #fff;
  font-size: 11px; }
.nl-root pre.nl-log { font-family: var(--jp-code-font-family, monospace); font-size: 12px; line-height: 1.35;
  white-space: pre-wrap; word-break: break-word; margin: 0 !important; padding: 0 !important;
  background: none !important; border: none !important; color: inherit; }
.nl-root .nl-stderr { color: var(--jp-ui-font-color2, #666); }
.nl-root .nl-prefix { font-weight: 600; }
.nl-root .nl-hint { color: var(--jp-ui-font-color2, #888); font-style: italic; }
.nl-root .nl-display { margin: 2px 0; }
.nl-root .nl-display img { max-width: 100%; }
.nl-root .nl-logbox { height: 280px; overflow: auto !important; border: 1px solid var(--jp-border-color2, #cfcfcf);
  padding: 4px 6px; display: flex !important; flex-direction: column-reverse !important; }
.nl-root .nl-loglines { flex: none !important; display: block !important; }
.nl-root .nl-loglines > * { display: block; }
.nl-root .nl-live { color: var(--jp-ui-font-color2, #666); }
.nl-root .nl-static-log { border: 1px solid var(--jp-border-color2, #cfcfcf);
  padding: 4px 6px; display: flex; flex-direction: column-reverse; }
.nl-root .nl-static-log > .nl-lines { flex: none; }
.nl-root .nl-error { color: var(--jp-error-color1, #c62828); }
.nl-root .nl-traceback { font-family: var(--jp-code-font-family, monospace); font-size: 12px; white-space: pre-wrap;
  border-left: 3px solid var(--jp-error-color1, #c62828); padding: 4px 8px; margin: 4px 0;
  background: var(--jp-layout-color2, transparent); }
.nl-root .nl-metrics { display: flex; flex-wrap: wrap; gap: 10px; margin: 4px 0; }
.nl-root .nl-chart svg { overflow: visible; }
.nl-root .nl-legend > span { margin-right: 10px; white-space: nowrap; }
.nl-root .nl-summary { margin: 4px 0; font-weight: 600; }
.nl-root details.nl-ranklog { display: block; width: auto; margin: 4px 0; padding: 0; border: none;
  background: none; }
.nl-root details.nl-ranklog > summary { cursor: pointer; margin: 4px 0 2px; display: list-item; }
"""


def rank_color(rank: int) -> str:
    return RANK_COLORS[rank % len(RANK_COLORS)]


def status_chips(statuses: dict) -> str:
    """One coloured chip per rank: ``rank 0: running``, the chips apart by a space of their own, so
    they still read apart where the stylesheet is stripped (an untrusted notebook)."""
    chips = []
    for rank, status in sorted(statuses.items()):
        color = STATUS_COLORS.get(status, "#8a8a8a")
        chips.append(f'<span class="nl-chip nl-{status}" style="background:{color}">rank {rank}: {status}</span>')
    return " ".join(chips)


def _escape(text: str) -> str:
    return html.escape(text, quote=False)


def _display_html(bundle: dict) -> str:
    """A rank's rich display: HTML, an image or SVG as it is, Markdown and text as text."""
    bundle = {mime: as_text(value) for mime, value in bundle.items()}  # never the repr of bytes
    if "text/html" in bundle:
        return f'<div class="nl-display">{bundle["text/html"]}</div>'
    for mime in ("image/png", "image/jpeg"):
        if mime in bundle:
            return f'<div class="nl-display"><img src="data:{mime};base64,{bundle[mime]}"/></div>'
    if "image/svg+xml" in bundle:
        return f'<div class="nl-display">{bundle["image/svg+xml"]}</div>'
    text = bundle.get("text/markdown", bundle.get("text/plain", ""))
    return f'<pre class="nl-log">{ansi_html(text)}</pre>'


def entries_html(entries: Iterable[Any], prefix: bool = False) -> str:
    """Log entries (``LogLine``) as HTML: runs of lines in one ``<pre>``, rich displays between them.

    With ``prefix`` every line starts with its rank, coloured like the rank (the "all ranks" view).
    """
    parts: list[str] = []
    run: list[str] = []

    def close_run() -> None:
        if run:
            parts.append(f'<pre class="nl-log">{"".join(run)}</pre>')
            run.clear()

    for entry in entries:
        tag = (
            f'<span class="nl-prefix" style="color:{rank_color(entry.rank)}">[rank {entry.rank}]</span> '
            if prefix
            else ""
        )
        if entry.bundle is not None and set(entry.bundle) - {"text/plain"}:
            close_run()
            if prefix:
                run.append(tag + "\n")
            close_run()
            parts.append(_display_html(entry.bundle))
            continue
        text = ansi_html(entry.text if entry.text.endswith("\n") else entry.text + "\n")
        if entry.stream == "stderr":
            text = f'<span class="nl-stderr">{text}</span>'
        run.append(tag + text)
    close_run()
    return "".join(parts)


def hint_html(text: str) -> str:
    return f'<div class="nl-hint">{_escape(text)}</div>'


def traceback_html(text: str) -> str:
    """The failing rank's traceback, as IPython formats it, in the theme's error colour."""
    return f'<div class="nl-traceback">{_escape(text.rstrip())}</div>'


def series_by_key(metrics: Iterable[dict]) -> dict:
    """{key: {rank: [(step, value), ...]}} from ``Launch.metrics`` records."""
    series: dict = {}
    for record in metrics:
        for key, value in record["values"].items():
            series.setdefault(key, {}).setdefault(record["rank"], []).append((record["step"], value))
    return series


def legend_html(ranks: Sequence[int]) -> str:
    """The ranks' colours, named (shown under the charts when lines differ between ranks). The
    swatches are text coloured by a style attribute, which an untrusted notebook keeps."""
    items = " ".join(f'<span><span style="color:{rank_color(r)}">━━</span> rank {r}</span>' for r in ranks)
    return f'<div class="nl-legend">{items}</div>'


def metrics_html(series: dict, width: int = 320, height: int = 150, as_image: bool = False) -> str:
    """One SVG line chart per metric, with step and value axes, one line per rank where ranks differ.

    ``as_image``: each chart an ``<img>`` with HTML labels, as the static form shows it (it reads the
    same in an untrusted notebook); otherwise inline SVG, as the live widget shows it.
    """
    if not series:
        return ""
    draw = _chart_image if as_image else _chart
    charts = [draw(key, ranks, width, height) for key, ranks in sorted(series.items())]
    return f'<div class="nl-metrics">{"".join(charts)}</div>'


def _distinct(ranks: dict) -> dict:
    """Ranks whose series differ; one line suffices when every rank logged the same values.

    Series are compared over the steps every rank has logged: a rank a step ahead of the others is
    not a difference, or a live chart would gain and lose a line (and its legend) at every step.
    The longest series is drawn when they agree.

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


def _fmt(value: float) -> str:
    return f"{value:.3g}"


class _Plot:
    """A chart's geometry: the ranks drawn, their lines, the axes, the ranges (no text)."""

    def __init__(self, ranks: dict, width: int, height: int, margins: tuple[int, int, int, int]) -> None:
        left, right, top, bottom = margins
        self.shown = _distinct(ranks)
        points = [(s, v) for series in self.shown.values() for s, v in series if math.isfinite(v)]
        steps = [s for s, _ in points] or [0]
        self.values = [v for _, v in points] or [0.0]
        lo, hi = min(self.values), max(self.values)
        self.constant = hi == lo
        self.lo, self.hi = (lo - 1, hi + 1) if self.constant else (lo, hi)
        self.s_lo, self.s_hi = min(steps), max(steps)
        self.left, self.top = left, top
        self.plot_w, self.plot_h = width - left - right, height - top - bottom

    def xy(self, step: float, value: float) -> tuple[float, float]:
        x = self.left + ((step - self.s_lo) / ((self.s_hi - self.s_lo) or 1)) * self.plot_w
        y = self.top + (1 - (value - self.lo) / (self.hi - self.lo)) * self.plot_h
        return x, y

    def lines(self) -> str:
        drawn = []
        for rank, series in sorted(self.shown.items()):
            finite = [(s, v) for s, v in series if math.isfinite(v)]
            color = rank_color(rank) if len(self.shown) > 1 else rank_color(0)
            if len(finite) == 1:
                x, y = self.xy(*finite[0])
                drawn.append(
                    f'<circle class="nl-line" data-rank="{rank}" cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{color}"/>'
                )
            else:
                coords = " ".join("{:.1f},{:.1f}".format(*self.xy(s, v)) for s, v in finite)
                drawn.append(
                    f'<polyline class="nl-line" data-rank="{rank}" fill="none" stroke="{color}"'
                    f' stroke-width="1.6" points="{coords}"/>'
                )
        return "".join(drawn)

    def axes(self, stroke: str = 'stroke="currentColor" stroke-opacity="0.35"') -> str:
        left, top, bottom = self.left, self.top, self.top + self.plot_h
        return (
            f'<g {stroke}><line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}"/>'
            f'<line x1="{left}" y1="{bottom}" x2="{left + self.plot_w}" y2="{bottom}"/></g>'
        )

    def latest(self) -> str:
        return ", ".join(f"rank {rank}: {_fmt(series[-1][1])}" for rank, series in sorted(self.shown.items()))

    def legend(self) -> str:
        """The ranks' legend where the chart has a line per rank, else nothing."""
        return legend_html(sorted(self.shown)) if len(self.shown) > 1 else ""


def _chart(key: str, ranks: dict, width: int, height: int) -> str:
    plot = _Plot(ranks, width, height, margins=(56, 8, 18, 20))
    left, top, plot_w, plot_h = plot.left, plot.top, plot.plot_w, plot.plot_h
    title = html.escape(key)
    value_labels = (
        f'<text x="{left - 4}" y="{top + plot_h / 2 + 4:.1f}" text-anchor="end">{_fmt(plot.values[0])}</text>'
        if plot.constant
        else f'<text x="{left - 4}" y="{top + 4}" text-anchor="end">{_fmt(plot.hi)}</text>'
        f'<text x="{left - 4}" y="{top + plot_h + 4}" text-anchor="end">{_fmt(plot.lo)}</text>'
    )
    axes = (
        f"{plot.axes()}"
        f'<g fill="currentColor" fill-opacity="0.75" font-size="10">{value_labels}'
        f'<text x="{left}" y="{height - 5}">step {plot.s_lo}</text>'
        f'<text x="{left + plot_w}" y="{height - 5}" text-anchor="end">{plot.s_hi}</text></g>'
    )
    note = " (constant)" if plot.constant else ""
    return (
        f'<div class="nl-chart" data-key="{title}">'
        f'<svg width="{width}" height="{height}" role="img" aria-label="{title}">'
        f'<text x="{left}" y="12" font-size="11" font-weight="600" fill="currentColor">{title}{note}</text>'
        f"{axes}{plot.lines()}</svg>{plot.legend()}"
        f"<div>latest {title}: {html.escape(plot.latest())}</div></div>"
    )


def _chart_image(key: str, ranks: dict, width: int, height: int) -> str:
    """The static form's chart: an ``<img>`` of the lines and axes, labels as HTML around it."""
    height -= 30  # the labels' two lines of HTML
    plot = _Plot(ranks, width, height, margins=(4, 8, 4, 4))
    grey_axes = plot.axes(stroke='stroke="#8c8c8c"')
    svg = f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">{grey_axes}{plot.lines()}</svg>'
    source = "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode("ascii")
    title = html.escape(key)
    latest = html.escape(plot.latest())
    low, high = _fmt(plot.lo), _fmt(plot.hi)
    ranges = f"constant {_fmt(plot.values[0])}" if plot.constant else f"from {low} to {high}"
    return (
        f'<div class="nl-chart" data-key="{title}"><div><b>{title}</b></div>'
        f'<img class="nl-chart-image" src="{source}" width="{width}" height="{height}"'
        f' alt="{title} chart, {ranges}; latest {latest}"/>'
        f"<div>{ranges}, steps {plot.s_lo} to {plot.s_hi}</div>{plot.legend()}"
        f"<div>latest {title}: {latest}</div></div>"
    )
