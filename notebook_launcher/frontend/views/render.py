"""HTML for a launch, as pure functions of its state (tested without a kernel).

Shared by the live widget and the static form a saved notebook keeps. Everything is plain HTML
and CSS, so it renders wherever HTML does: JupyterLab, Notebook 7, Colab, Kaggle, VS Code,
nbconvert, GitHub and nbviewer. Colours come from JupyterLab's theme variables (with fallbacks
elsewhere) and ``palette.py``, so dark themes read as well as light ones.

A saved notebook someone else opens is untrusted: JupyterLab then strips ``<style>`` and ``<svg>``
but keeps style attributes, so whatever must read there (chips, rank prefixes) carries its colours
in style attributes, and the stylesheet refines them where it is kept. Charts: ``charts.py``.

Examples:
    >>> "rank 1: running" in status_chips({0: "done", 1: "running"})
    True
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import Any

from ...wire.mime import as_text
from .ansi import ansi_html
from .palette import SHARED_PILL, STATUS_COLORS, prefix_class, prefix_css, rank_pill
from .said_once import ranks_label

__all__ = ["CSS", "status_chips", "chip_html", "entries_html", "traceback_html", "hint_html", "capped_log"]

CSS = """
.nl-root { color: var(--jp-ui-font-color1, inherit); font-size: 12px; }
.nl-root .nl-head { margin: 2px 0 4px; }
.nl-root .nl-stragglers { margin: 0 0 4px; }
.nl-root .nl-places { color: var(--jp-ui-font-color2, #666); margin: 0 0 4px; }
.nl-root .nl-chip { display: inline-block; margin: 0 4px 2px 0; padding: 1px 8px; border-radius: 10px; color: #fff;
  font-size: 11px; }
.nl-root pre.nl-log { font-family: var(--jp-code-font-family, monospace); font-size: 12px; line-height: 1.35;
  white-space: pre-wrap; word-break: break-word; margin: 0 !important; padding: 0 !important;
  background: none !important; border: none !important; color: inherit; }
.nl-root .nl-stderr { color: var(--jp-ui-font-color2, #666); }
.nl-root .nl-prefix { font-weight: 600; }
.nl-root .nl-prefix.nl-ranks { color: inherit !important; background: none !important; padding: 0 !important; }
.nl-root .nl-chart { max-width: 100%; }
.nl-root .lm-TabBar-content { overflow-x: auto; overflow-y: hidden; scrollbar-width: thin; }
.nl-root .lm-TabBar-tab { flex: 0 0 auto !important; min-width: max-content !important; max-width: none !important; }
.nl-root .nl-actions { flex-wrap: wrap; gap: 4px 0; }
.nl-root .nl-actions .jupyter-button { flex: 0 0 auto; width: auto; min-width: max-content; }
.nl-root .jupyter-button:focus-visible, .nl-root .nl-logend:focus-visible,
.nl-root .nl-static-log > .nl-lines:focus-visible {
  outline: 2px solid var(--jp-brand-color0, #0d47a1) !important; outline-offset: 1px; }
.nl-root .nl-hint { color: var(--jp-ui-font-color2, #888); font-style: italic; }
.nl-root .nl-display { margin: 2px 0; }
.nl-root .nl-display img { max-width: 100%; }
.nl-root .nl-logbox { height: 280px; overflow: auto !important; border: 1px solid var(--jp-border-color2, #cfcfcf);
  padding: 4px 6px; display: flex !important; flex-direction: column-reverse !important; }
.nl-root .nl-loglines { flex: none !important; display: block !important; }
.nl-root .nl-loglines > * { display: block; }
.nl-root .nl-live { color: var(--jp-ui-font-color2, #666); }
.nl-root .nl-logend { min-height: 4px; }
.nl-root .nl-static-log { border: 1px solid var(--jp-border-color2, #cfcfcf);
  padding: 4px 6px; display: flex; flex-direction: column-reverse; }
.nl-root .nl-static-log > .nl-lines { flex: none; }
.nl-root .nl-error { color: var(--jp-error-color1, #c62828); }
.nl-root .nl-traceback { font-family: var(--jp-code-font-family, monospace); font-size: 12px; white-space: pre-wrap;
  border-left: 3px solid var(--jp-error-color1, #c62828); padding: 4px 8px; margin: 4px 0;
  background: var(--jp-layout-color2, transparent); }
.nl-root .nl-metrics { display: flex; flex-wrap: wrap; gap: 10px; margin: 4px 0; }
.nl-root .nl-legend > span { margin-right: 10px; white-space: nowrap; }
.nl-root .nl-summary { margin: 4px 0; font-weight: 600; }
.nl-root details.nl-ranklog { display: block; width: auto; margin: 4px 0; padding: 0; border: none;
  background: none; }
.nl-root details.nl-ranklog > summary { cursor: pointer; margin: 4px 0 2px; display: list-item; }
""" + prefix_css()


def status_chips(statuses: dict, slow: Iterable[int] = ()) -> str:
    """One coloured chip per rank: ``rank 0: running``, the chips apart by a space of their own, so
    they still read apart where the stylesheet is stripped (an untrusted notebook). A rank in
    ``slow`` (a straggler) reads ``rank 2: running · slow``."""
    slow = set(slow)
    return " ".join(
        chip_html(rank, status, f"{status} · slow" if rank in slow else status)
        for rank, status in sorted(statuses.items())
    )


def chip_html(rank: int, status: str, text: str) -> str:
    """A rank's chip: white text on its status's colour, with its padding and margin, all in the style
    attribute (kept where the stylesheet is not: an untrusted notebook, a collaborator's page), so
    it reads at 4.5:1 and apart from its neighbours anywhere.

    Examples:
        >>> chip_html(3, "failed", "failed")[:75]
        '<span class="nl-chip nl-failed" style="background:#d32f2f;color:#ffffff;dis'
    """
    color = STATUS_COLORS.get(status, STATUS_COLORS["starting"])
    look = f"background:{color};color:#ffffff;display:inline-block;padding:1px 8px;margin:0 4px 2px 0"
    look += ";border-radius:10px"
    return f'<span class="nl-chip nl-{status}" style="{look}">rank {rank}: {text}</span>'


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
        tag = _prefix(entry) if prefix else ""
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


def _prefix(entry: Any) -> str:
    """``[rank N]``: white on the rank's pill by its style attribute (all an untrusted notebook
    keeps), the rank's colour mixed with the theme's text where the stylesheet is kept. A line
    several ranks said (``said_once``) reads ``[ranks 0–7]`` on a pill of no one rank's colour."""
    ranks = getattr(entry, "ranks", ())
    if len(ranks) > 1:
        style = f"color:#ffffff;background-color:{SHARED_PILL};padding:0 3px;border-radius:3px"
        return f'<span class="nl-prefix nl-ranks" style="{style}">[{ranks_label(ranks)}]</span> '
    rank = entry.rank
    style = f"color:#ffffff;background-color:{rank_pill(rank)};padding:0 3px;border-radius:3px"
    return f'<span class="nl-prefix {prefix_class(rank)}" style="{style}">[rank {rank}]</span> '


def capped_log(inner: str, label: str = "log") -> str:
    """A log of the static forms, as tall as the live log at most, in a region named ``label``.

    The cap is a style attribute: an untrusted notebook (or a collaborator's page) loses the
    stylesheet, not style attributes; so is the reversed column that opens the box on its newest
    lines, as the live log does. The keyboard reaches the log (Tab, then Page Up/Down scroll it) through its lines,
    an ``<a>`` with a tab index: the one element that keeps a tab index where the notebook is
    untrusted (the sanitizer drops it from a ``<div>``); it has no ``href``, so it is no link.

    Examples:
        >>> box = capped_log("x", "rank 0 log")
        >>> "max-height: 280px" in box and 'aria-label="rank 0 log"' in box and 'tabindex="0"' in box
        True
    """
    cap = "max-height: 280px; overflow: auto; display: flex; flex-direction: column-reverse"  # the newest lines in view
    lines = "display: block; flex: none; color: inherit; text-decoration: none"
    return (
        f'<div class="nl-static-log" style="{cap}" role="region" aria-label="{html.escape(label)}">'
        f'<a class="nl-lines" tabindex="0" style="{lines}">{inner}</a></div>'
    )


def hint_html(text: str) -> str:
    return f'<div class="nl-hint">{_escape(text)}</div>'


def traceback_html(text: str) -> str:
    """The failing rank's traceback, as IPython formats it, in the theme's error colour."""
    return f'<div class="nl-traceback">{_escape(text.rstrip())}</div>'
