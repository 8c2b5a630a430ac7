"""The live launch widget, and the static form that a saved notebook keeps.

The launch has one output (a display with an id). It starts as the static form (``static.py``),
which costs nothing to make, so a launch that ends quickly never builds a widget; when the cell
blocks on the launch (``notebook_launcher``), the output appears only with the widget or the final
form, whichever comes first: one message instead of two for a quick launch. When the launch
is still running after ``build_after`` seconds, the widget is built from core ipywidgets (so it
renders in JupyterLab, Notebook 7, Colab, Kaggle and VS Code, with ipywidgets 7 and 8) and the
output becomes the widget view *plus* the static form: front ends that draw widgets show the
widget, the others (nbclient, nbconvert, GitHub, a reopened notebook) show the static form. While
the launch runs, its latest static form is kept — 2, 4, 8, … seconds in, then steadily, and (in a
file, where it costs no redraw) once the ranks have been quiet for a second — where a
notebook saved mid-launch finds it (``snapshots.py``: a file the Jupyter server saves in place of
the widget, or the output itself); at the end the output becomes the static form alone and the
widget is closed. A saved notebook thus never shows "Error displaying widget" (``saved_outputs``).

The widget: a header with a status chip per rank; tabs "all ranks" (every line with its rank, in
the order they came; selected first for up to 8 ranks) and one per rank (``LogBox``, which keeps
the reader's position); the metric charts; "Save log" (writes every line of every rank to a file
next to the notebook) and "Log as text" (the lines in a text box, to copy). Events only change
plain state; ``flush()`` — called by the supervisor after each batch of events — draws what
changed, at most ``1 / interval`` times a second, so a rank printing 100k lines costs the browser
~10 updates a second, not 100k.
"""

from __future__ import annotations

import html
import time
from typing import Any

from ...kernel_streams import skip_idle_display_flushes
from ...launching.listener import LaunchState, LiveLine, Metric, Output, Shown, Status
from ...telemetry import SAMPLED_BY_KERNEL
from ..busy_status import BusyWhileWaiting
from .base import LaunchView
from .cell_handoff import CellHandoff
from .chart_controls import ChartControls
from .charts import metrics_html, series_by_key
from .logbox import LogBox
from .render import CSS, status_chips
from .said_once import SaidOnce, collapsing
from .snapshots import snapshots_for, widget_output
from .static import (
    all_ranks_kept,
    header_text,
    lines_kept,
    notes_html,
    stacks_html,
    stacks_section,
    static_bundle,
)
from .widget_actions import WidgetActions

__all__ = ["WidgetView"]

STREAMS = ("stdout", "stderr")  # the order in which a rank's open rows are shown

_STATIC_FIRST = 2.0  # seconds to the first snapshot of the static form (the gap then doubles)
_SETTLE = 1.0  # seconds of quiet after which a file snapshot catches up with the last events
_ALL_RANKS_UP_TO = 8
BUILD_AFTER = 0.25  # seconds a launch runs before its widget is built


class WidgetView(WidgetActions, LaunchView):
    def __init__(
        self, max_lines: int = 2000, interval: float = 0.1, build_after: float | None = None, show_at_start: bool = True
    ) -> None:
        self.interval = interval
        self.show_at_start = show_at_start
        self.build_after = BUILD_AFTER if build_after is None else build_after
        self._max_lines = max_lines
        self._launch: LaunchState | None = None
        self._handle: Any = None
        self._widgets: Any = None
        self.built = False
        self.renders = 0
        self.static: dict = {}  # the static form, as last made
        self.shown: dict = {}  # the output's mime bundle, as last sent
        self._last_render = 0.0
        self._dirty: set = set()
        self._seen: dict[int, int] = {}
        self._said = SaidOnce() if collapsing() else None  # "all ranks" shows a line several ranks said once
        self._replaced: set[tuple[int, int]] = set()
        self._live: dict[tuple[int, str], str] = {}  # (rank, stream): its open rows (bars being drawn)
        self._static_gap = _STATIC_FIRST
        self._next_static = 0.0
        self._stacks_pending = False  # stacks were taken: the widget shows them at the next render
        self._last_change = 0.0  # when the last event came (monotonic)
        self._unsaved_change = False  # an event came since the last snapshot
        self._handoff = CellHandoff(self._show)  # the last form, shown by a cell waiting for it
        self._busy: BusyWhileWaiting | None = None  # the kernel reads Busy while the cell waits

    # -- events (the cell's thread for on_start; the supervisor thread for the rest) ------------------

    @property
    def launch(self) -> LaunchState:
        """The launch shown (set by ``on_start``, which comes first)."""
        assert self._launch is not None, "on_start() comes first"
        return self._launch

    def on_start(self, launch: LaunchState) -> None:
        self._launch = launch
        self._started = time.monotonic()
        self._seen = {rank: 0 for rank in launch.ranks}
        self._live = {}
        self._snapshots = snapshots_for(launch.id)
        if self.show_at_start:
            self.static = static_bundle(launch)
            self._show(self.static)

    def _show(self, bundle: dict) -> None:
        """Make ``bundle`` the launch's output: displayed the first time, updated after."""
        from IPython import get_ipython
        from IPython.display import display

        skip_idle_display_flushes(get_ipython())
        self.shown = bundle
        if self._handle is None:
            self._handle = display(bundle, raw=True, display_id=True, metadata=self._snapshots.metadata)
        else:
            self._handle.update(bundle, raw=True, metadata=self._snapshots.metadata)

    def on_status(self, event: Status) -> None:
        self._changed()
        self._dirty.add("header")
        if event.status == "failed" and self.built and event.rank in self.launch.ranks:
            self.tabs.selected_index = self._tab_of(event.rank)

    def on_output(self, event: Output) -> None:
        self._changed()
        self._live.pop((event.rank, event.stream), None)
        self._dirty.add("lines")

    def on_live(self, event: LiveLine) -> None:
        if event.text != self._live.get((event.rank, event.stream), ""):
            self._live[(event.rank, event.stream)] = event.text
            self._dirty.add("lines")

    def on_display(self, event: Shown) -> None:
        self._changed()
        if event.replaced:
            self._replaced.add((event.rank, event.index))
        self._dirty.add("lines")

    def on_metric(self, event: Metric) -> None:
        if not set(event.values) <= set(SAMPLED_BY_KERNEL):  # the ranks' own news: a snapshot waits for quiet
            self._changed()
        self._dirty.add("metrics")
        self._dirty.add("lines")  # an empty log's hint mentions the chart

    def _changed(self) -> None:
        self._last_change = time.monotonic()
        self._unsaved_change = True

    def flush(self) -> float | None:
        now = time.monotonic()
        if not self.built:
            wait = self.build_after - (now - self._started)
            if wait > 0:
                return wait
            self._build()
            self._next_static = now + self._static_gap
        wait = self.interval - (now - self._last_render)
        if wait <= 0:
            self.render()
            wait = self.interval
        settle = self._last_change + _SETTLE if self._unsaved_change and self._snapshots.settles else float("inf")
        if now >= self._next_static:
            self._show_static()
        elif now >= settle:  # the ranks went quiet: a notebook saved now gets everything they wrote
            self._show_static(on_schedule=False)
            settle = float("inf")
        now = time.monotonic()
        return max(0.0, min(1.0, self._next_static - now, settle - now, wait if self._dirty else 1.0))

    def on_finish(self, launch: LaunchState) -> None:
        self.static = static_bundle(launch)
        if self.built:
            self.render()
        # a first output (a quick launch) may wait for the cell; a widget's is replaced before it closes
        self._handoff.show(self.static, leave_for_cell=self._handle is None and not self.built)
        self._snapshots.end(self.static)
        if self.built:
            self.close()

    def cell_waits(self, waiting: bool) -> None:
        if waiting:
            self._busy = BusyWhileWaiting.for_this_cell()
        elif self._busy is not None:
            self._busy.stop()
            self._busy = None
        self._handoff.cell_waits(waiting)

    # -- the widget ---------------------------------------------------------------------------------

    def _build(self) -> None:
        import ipywidgets as w

        self._widgets = w
        launch = self.launch
        ranks = launch.ranks
        hint = "“Save log” below, or notebook_launcher.last_launch().logs(rank), has every line"
        # with many ranks each box keeps fewer lines, as the static form does: the page stays light
        self.all_box = LogBox(w, prefix=True, max_lines=all_ranks_kept(len(ranks), self._max_lines), hint=hint)
        own = lines_kept(len(ranks), self._max_lines)
        self.boxes = {rank: LogBox(w, prefix=False, max_lines=own, hint=hint) for rank in ranks}
        self.style = w.HTML(f"<style>{CSS}</style>")
        self.header = w.HTML()
        self.tabs = w.Tab(children=[self.all_box.pane] + [self.boxes[rank].pane for rank in ranks])
        self.tabs.set_title(0, "all ranks")
        self._titles: dict[int, str] = {}
        self._title_tabs()
        self.tabs.selected_index = 0 if len(ranks) <= _ALL_RANKS_UP_TO else 1
        self.metrics_box = w.HTML()
        self.chart_controls = ChartControls(w, changed=lambda: self._dirty.add("metrics"))
        self.charts = w.VBox([self.chart_controls.box, self.metrics_box])
        self.charts.add_class("nl-charts")
        self.charts.layout.display = "none"
        self._build_actions(w)
        self.root = w.VBox(
            [self.style, self.header, self.tabs, self.charts, self.actions, self.stacks_box, self.text_log]
        )
        self.root.add_class("nl-root")
        self.built = True
        self._dirty.update({"header", "lines", "metrics"})
        self.render()
        self.static = static_bundle(launch)
        self._show(widget_output(self.static, self.root.model_id, live=self._snapshots.live))
        if self._snapshots.live:  # the server serves it: a page opened from now on finds the launch
            self._snapshots.keep(self._handle, self.static, self.root.model_id)

    def _title_tabs(self) -> None:
        """Name each rank's tab, with its node once a cluster has placed it ("rank 2 · node 1")."""
        launch = self.launch
        for index, rank in enumerate(launch.ranks, start=1):
            place = launch.place(rank)
            title = f"rank {rank}" + (f" · {place.short}" if place is not None else "")
            if self._titles.get(rank) != title:
                self._titles[rank] = title
                self.tabs.set_title(index, title)

    def _tab_of(self, rank: int) -> int:
        return 1 + self.launch.ranks.index(rank)

    def _follow_ranks(self) -> None:
        """The rendezvous renumbered this node's ranks (c10d, at a start or a restart): each box
        goes on under its rank's new number."""
        ranks = self.launch.ranks
        if ranks == list(self._seen):
            return
        moved = dict(zip(self._seen, ranks, strict=True))
        self._seen = dict(zip(ranks, self._seen.values(), strict=True))
        self._replaced = {(moved.get(rank, rank), index) for rank, index in self._replaced}
        self._live = {(moved.get(rank, rank), stream): text for (rank, stream), text in self._live.items()}
        if self.built:
            self.boxes = dict(zip(ranks, self.boxes.values(), strict=True))
            self._titles = {}

    def render(self) -> None:
        """Show what has arrived since the last render now (``flush`` does it at most every
        ``NOTEBOOK_LAUNCHER_FLUSH_INTERVAL`` seconds)."""
        dirty, self._dirty = self._dirty, set()
        self._follow_ranks()
        launch = self.launch
        self.header.value = (
            f'<div class="nl-head"><b>notebook_launcher</b> · '
            f"{html.escape(header_text(launch).split(' · ', 1)[1])}</div>"
            f"<div>{status_chips({r: launch.rank_status(r) for r in launch.ranks}, launch.stragglers)}</div>"
            + notes_html(launch)
        )
        self._title_tabs()
        if "lines" in dirty:
            self._render_lines()
        if self._stacks_pending:
            self._stacks_pending = False
            title, stacks, _ = stacks_section(launch)
            self.stacks_box.value = stacks_html(title, stacks) if stacks else ""
        if "metrics" in dirty:
            controls = self.chart_controls
            series = series_by_key(launch.metrics, x=controls.x)
            self.metrics_box.value = metrics_html(series, smoothing=controls.smoothing, clip=controls.clip)
            self.charts.layout.display = None if series else "none"
        self._last_render = time.monotonic()
        self.renders += 1

    def _extend_all(self, fresh: list, skipped: int) -> None:
        """Add the new lines to "all ranks", a line other ranks said too once (``said_once``): one
        that joins a line already shown re-draws that line with the ranks that said it."""
        if self._said is None:
            self.all_box.extend([entry for entry, _ in fresh], [key for _, key in fresh], skipped)
            return
        added: dict = {}
        for entry, key in fresh:
            shown_key, shown = self._said.take(entry, key)
            if shown_key == key or shown_key in added:
                added[shown_key] = shown
            else:
                self.all_box.replace(shown_key, shown)
        self.all_box.extend(list(added.values()), list(added), skipped)

    def _render_lines(self) -> None:
        """Add what the ranks wrote since the last render; of a flood, only the lines that will show."""
        launch = self.launch
        fresh: list = []
        skipped_all = 0
        for rank in list(self._seen):  # the numbers the boxes have: a renumbering is taken at the next render
            count = launch.line_count(rank)
            start = max(self._seen[rank], count - self._max_lines)
            skipped = start - self._seen[rank]
            new = launch.lines(rank, start, count)
            keys = [(rank, start + i) for i in range(len(new))]
            self._seen[rank] = count
            self.boxes[rank].extend(new, keys, skipped)
            fresh.extend(zip(new, keys, strict=True))
            skipped_all += skipped
        fresh.sort(key=lambda pair: pair[0].seq)
        fresh = fresh[-self._max_lines :]
        self._extend_all(fresh, skipped_all)
        replaced, self._replaced = self._replaced, set()
        for rank, index in replaced:
            entry = launch.line(rank, index)
            self.boxes[rank].replace((rank, index), entry)
            self.all_box.replace((rank, index), entry)
        live = {rank: "\n".join(filter(None, (self._live.get((rank, s), "") for s in STREAMS))) for rank in self.boxes}
        for rank, text in live.items():
            self.boxes[rank].set_live(text)
        rows = (f"[rank {rank}] {row}" for rank, text in live.items() for row in text.splitlines())
        self.all_box.set_live("\n".join(rows))
        charted = {record["rank"] for record in launch.metrics} if launch.metrics else set()
        self.all_box.charted = bool(charted)
        for rank, box in self.boxes.items():
            box.charted = rank in charted
        for box in (self.all_box, *self.boxes.values()):
            box.render()

    def _show_static(self, on_schedule: bool = True) -> None:
        self.static = static_bundle(self.launch)
        self._snapshots.keep(self._handle, self.static, self.root.model_id)
        self._unsaved_change = False
        if on_schedule:
            self._next_static = time.monotonic() + self._static_gap
            self._static_gap = min(self._static_gap * 2, self._snapshots.longest)
