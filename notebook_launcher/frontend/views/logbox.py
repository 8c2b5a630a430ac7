"""A log that grows in the browser without disturbing the reader.

Each tab of the widget holds a ``LogBox`` (its ``pane``, which the tab shows or hides): a box that
scrolls, laid out ``column-reverse`` around one inner box, whose children are chunks of ``CHUNK``
lines (core ``ipywidgets.HTML``). New lines only ever change the last chunk or append a new one,
so the chunks the reader looks at, and any text selected in them, stay as they are. The scroll position needs no script:

* the outer box's scroll origin is its bottom, so a new view opens on the newest line, and while
  the reader is at the bottom the newest line stays in view;
* scrolled up, the browser's scroll anchoring keeps the lines in view where they are as more
  arrive below.

Beyond ``max_lines`` the oldest chunks are emptied (a note says how many lines are left out and
where they are); the list of chunk widgets is compacted only rarely, since that rebuilds the view.

Example (in a kernel)::

    box = LogBox(ipywidgets, prefix=False)
    box.extend(launch.lines(0))
    box.render()
"""

from __future__ import annotations

from typing import Any

from .ansi import ansi_html
from .render import entries_html, hint_html

__all__ = ["LogBox", "CHUNK"]

CHUNK = 100  # lines per HTML widget


class LogBox:
    def __init__(self, widgets: Any, prefix: bool, max_lines: int = 2000, hint: str = "") -> None:
        self._widgets = widgets
        self._prefix = prefix
        self._max_lines = max_lines
        self._hint = hint
        self._chunks: list[list[Any]] = []  # entries per chunk widget
        self._views: list[Any] = []
        self._dirty: set[int] = set()
        self._where: dict[tuple[int, int], tuple[int, int]] = {}  # (rank, index) -> (chunk, position)
        self._first_chunk = 0  # chunks before it were emptied
        self.hidden = 0
        self.live = ""
        self.charted = False  # the ranks have logged metrics (the chart shows them) though none printed
        self._note = widgets.HTML(hint_html("no output yet"))
        self._live = widgets.HTML("")
        self._live.add_class("nl-logend")
        # the keyboard's way into the log: Tab stops at its newest line, and Page Up/Down scroll the
        # box (a box widget cannot be made focusable itself); ipywidgets 7 has no such trait
        if "tabbable" in self._live.keys:
            self._live.tabbable = True
        self.inner = widgets.VBox([self._note, self._live])
        self.inner.add_class("nl-loglines")
        self.box = widgets.Box([self.inner])
        self.box.add_class("nl-logbox")
        self.box.layout.flex_flow = "column-reverse"
        # what a tab shows and hides: the scrolling box's own display rule would beat the tab's hiding
        self.pane = widgets.VBox([self.box])
        self._children_changed = False

    def extend(self, entries: list[Any], indices: list[tuple[int, int]], skipped: int = 0) -> None:
        """Append entries; ``indices`` are their (rank, index in that rank's log), for later replacement.

        ``skipped`` lines came before these but are not shown (a flood of more than ``max_lines``
        since the last render): everything shown so far is older still, so it is left out too.
        """
        if skipped:
            self.hidden += skipped + self.lines_shown
            for chunk in range(self._first_chunk, len(self._chunks)):
                self._chunks[chunk] = []
                self._dirty.add(chunk)
            self._first_chunk = len(self._chunks)
        for entry, key in zip(entries, indices, strict=True):
            if not self._chunks or len(self._chunks[-1]) >= CHUNK:
                self._chunks.append([])
                self._views.append(self._widgets.HTML(""))
                self._children_changed = True
            self._chunks[-1].append(entry)
            self._where[key] = (len(self._chunks) - 1, len(self._chunks[-1]) - 1)
            self._dirty.add(len(self._chunks) - 1)
        self._trim()

    def replace(self, key: tuple[int, int], entry: Any) -> None:
        """An updated display: re-draw the chunk that shows it (if it is still shown)."""
        where = self._where.get(key)
        if where is None or where[0] < self._first_chunk:
            return
        chunk, position = where
        self._chunks[chunk][position] = entry
        self._dirty.add(chunk)

    @property
    def note_html(self) -> str:
        """The hint above the log ("no output yet", what the box leaves out), as shown."""
        return self._note.value

    @property
    def live_html(self) -> str:
        """The line a rank is still writing (a progress bar), as shown."""
        return self._live.value

    def set_live(self, text: str) -> None:
        self.live = text

    @property
    def lines_shown(self) -> int:
        return sum(len(chunk) for chunk in self._chunks[self._first_chunk :])

    def _trim(self) -> None:
        while (
            self._first_chunk < len(self._chunks) - 1
            and self._chunks[self._first_chunk] is not None
            and self.lines_shown - len(self._chunks[self._first_chunk]) >= self._max_lines
        ):
            self.hidden += len(self._chunks[self._first_chunk])
            self._chunks[self._first_chunk] = []
            self._dirty.add(self._first_chunk)
            self._first_chunk += 1
        if self._first_chunk > 3 * (self._max_lines // CHUNK + 1):  # compact: rebuilds the view, rarely
            self._chunks = self._chunks[self._first_chunk :]
            self._views = self._views[self._first_chunk :]
            self._where = {k: (c - self._first_chunk, p) for k, (c, p) in self._where.items() if c >= self._first_chunk}
            self._dirty = {c - self._first_chunk for c in self._dirty if c >= self._first_chunk}
            self._first_chunk = 0
            self._children_changed = True

    def render(self) -> bool:
        """Push what changed to the widgets; True if anything did."""
        changed = bool(self._dirty) or self._children_changed
        for chunk in sorted(self._dirty):
            if chunk < len(self._views):
                self._views[chunk].value = entries_html(self._chunks[chunk], prefix=self._prefix)
        self._dirty.clear()
        note = f"… {self.hidden} earlier lines not shown here — {self._hint}" if self.hidden else ""
        note_html = hint_html(note or self._empty_hint()) if note or not (self._chunks or self.live) else ""
        if self._note.value != note_html:
            self._note.value = note_html
            changed = True
        live_html = f'<pre class="nl-log nl-live">{ansi_html(self.live)}</pre>' if self.live else ""
        if self._live.value != live_html:
            self._live.value = live_html
            changed = True
        if self._children_changed:
            self.inner.children = [self._note, *self._views, self._live]
            self._children_changed = False
        return changed

    def _empty_hint(self) -> str:
        return "nothing printed yet; the logged metrics are charted below" if self.charted else "no output yet"

    def close(self) -> None:
        """Empty and close every widget (emptied first: headless runners such as nbclient keep the
        last state of every widget in the notebook's metadata, closed or not)."""
        for view in [*self._views, self._note, self._live]:
            if view.value:  # an emptied chunk needs no message
                view.value = ""
        for view in [*self._views, self._note, self._live, self.inner, self.box, self.pane]:
            view.close()
