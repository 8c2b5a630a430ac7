"""The finished form of a ``%%dist`` cell: its ranks' lines under one quiet line, no launch frame.

A ``%%dist`` cell is a cell: what it printed matters, not a launch header, a chip per rank and a
summary under two lines of output. Once the call has ended its output becomes this form: one dim
line (the ranks, how long, and how it ended: "interrupted after 1.3 s", never a failure for an
interrupt) and every rank's lines, prefixed ``[rank N]``, in one capped log. A rank's exception is
the cell's error, shown once by the cell itself.

Examples:
    >>> from types import SimpleNamespace
    >>> call = SimpleNamespace(called=[0, 1], elapsed=0.04, status="succeeded", failed_rank=None, exception=None)
    >>> compact_head(call)
    '%%dist on ranks 0, 1 · 0.0 s'
    >>> compact_head(SimpleNamespace(called=[1], elapsed=1.31, status="stopped", failed_rank=None, exception=None))
    '%%dist on rank 1 · interrupted after 1.3 s'
"""

from __future__ import annotations

import html
from typing import Any

from .render import CSS, capped_log, entries_html

__all__ = ["compact_head", "compact_bundle"]


def compact_head(call: Any) -> str:
    ranks = call.called
    who = f"rank{'s' if len(ranks) != 1 else ''} {', '.join(map(str, ranks))}"
    took = f"{call.elapsed:.1f} s"
    ended = {
        "stopped": f"interrupted after {took}",
        "failed": f"rank {call.failed_rank} raised {type(call.exception).__name__} after {took}",
    }.get(call.status, took)
    return f"%%dist on {who} · {ended}"


def compact_bundle(call: Any, entries: list, plain_lines: list[str]) -> dict:
    """The call's finished form: ``entries`` (its log entries, in order) as HTML, ``plain_lines``
    (the same, as ``[rank N]`` text lines) as text."""
    head = compact_head(call)
    log = capped_log(entries_html(entries, prefix=True), label="the ranks' log") if entries else ""
    return {
        "text/plain": "\n".join([head, *plain_lines]),
        "text/html": (
            f'<div class="nl-root nl-static nl-compact" data-launch="{html.escape(call.id)}"><style>{CSS}</style>'
            f'<div class="nl-hint">{html.escape(head)}</div>{log}</div>'
        ),
    }
