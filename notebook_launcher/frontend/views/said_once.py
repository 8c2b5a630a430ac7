"""One line for what several ranks say: in "all ranks", a line that other ranks print too (a
library's warning, a banner, "epoch 3 done" from every rank) is shown once, with the ranks that
said it: ``[ranks 0–7] epoch 3 done``. Each rank's own tab, ``logs(rank)`` and the saved log file
keep every line.

A line joins an earlier one when it has the same text on the same stream, comes from a rank that
has not said it yet, and arrives within ``MERGE_WINDOW`` seconds of it; a rank saying it again
starts a new line, and a rank's display is never merged. ``NOTEBOOK_LAUNCHER_COLLAPSE_LINES=off``
shows every rank's line.

Examples:
    >>> from notebook_launcher.launching.ranklog import LogLine
    >>> lines = [LogLine(rank, "stdout", "epoch 1 done\\n", 10.0 + rank / 10, rank) for rank in range(4)]
    >>> [(said.text, ranks_label(said.ranks)) for said in collapsed(lines)]
    [('epoch 1 done\\n', 'ranks 0–3')]
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Mapping
from typing import Any

from ...choices import switched_on

__all__ = ["SaidOnce", "collapsed", "collapsing", "ranks_label", "MERGE_WINDOW", "COLLAPSE_ENV"]

MERGE_WINDOW = 5.0  # seconds within which the same line from another rank joins the first
COLLAPSE_ENV = "NOTEBOOK_LAUNCHER_COLLAPSE_LINES"


def ranks_label(ranks: Iterable[int]) -> str:
    """``rank 3``, ``ranks 0–7`` or ``ranks 0–2, 5``.

    Examples:
        >>> ranks_label([3]), ranks_label(range(8)), ranks_label([5, 0, 1, 2])
        ('rank 3', 'ranks 0–7', 'ranks 0–2, 5')
    """
    ordered = sorted(set(ranks))
    if len(ordered) == 1:
        return f"rank {ordered[0]}"
    runs: list[list[int]] = []
    for rank in ordered:
        if runs and rank == runs[-1][-1] + 1:
            runs[-1].append(rank)
        else:
            runs.append([rank])
    parts = [f"{run[0]}–{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)) for run in runs]
    return "ranks " + ", ".join(parts)


def collapsing(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether "all ranks" shows a line several ranks said once (unless ``NOTEBOOK_LAUNCHER_COLLAPSE_LINES`` is off)."""
    return switched_on(COLLAPSE_ENV, environ)


class SaidOnce:
    """Takes log lines in arrival order; says which start a line and which join an earlier one.

    ``take(entry, key)`` returns ``(key, entry)``: the entry's own key for a new line, or the key of
    the earlier line it joined with that line's entry as it now reads (its ``ranks`` the ranks that said it).
    """

    def __init__(self, window: float = MERGE_WINDOW) -> None:
        self._window = window
        self._recent: OrderedDict[tuple[str, str], tuple[Any, Any]] = OrderedDict()

    def take(self, entry: Any, key: Any) -> tuple[Any, Any]:
        while self._recent:
            _, (_, oldest) = next(iter(self._recent.items()))
            if entry.time - oldest.time <= self._window:
                break
            self._recent.popitem(last=False)
        if entry.bundle is not None:
            return key, entry
        said = (entry.stream, entry.text)
        earlier = self._recent.get(said)
        if earlier is not None:
            first_key, first = earlier
            ranks = first.ranks or (first.rank,)
            if entry.rank not in ranks:
                joined = first._replace(ranks=(*ranks, entry.rank))
                self._recent[said] = (first_key, joined)
                return first_key, joined
        self._recent.pop(said, None)
        self._recent[said] = (key, entry)
        return key, entry


def collapsed(entries: Iterable[Any], window: float = MERGE_WINDOW) -> list[Any]:
    """``entries`` (arrival order) with each line several ranks said once, where it first came."""
    said = SaidOnce(window)
    out: dict[Hashable, Any] = {}
    for index, entry in enumerate(entries):
        key, shown = said.take(entry, index)
        out[key] = shown
    return list(out.values())
