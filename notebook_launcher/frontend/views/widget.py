"""The live launch widget: status chips, one log tab per rank, metric charts, a summary line.

Built from core ipywidgets only (HTML, Tab, VBox), so it renders in JupyterLab, Notebook 7, Colab,
Kaggle and VS Code, with ipywidgets 7 and 8. Events only change plain state; ``flush()`` — called
by the supervisor after each batch of events — renders what changed, at most ``1 / interval`` times
a second, so a rank printing 100k lines costs the browser ~10 updates a second, not 100k. Each tab
shows the last ``max_lines`` lines; the full log stays on the ``Launch``.

Where the front end cannot draw widgets (nbconvert, a plain terminal), the output's text/plain
part still says what happened: it is rewritten with the summary when the launch ends.
"""

from __future__ import annotations

import collections
import time

from .base import LaunchView
from .render import log_html, metrics_html, series_by_key, status_chips

__all__ = ["WidgetView"]

_SYMBOL = {"succeeded": "✔", "failed": "✘", "stopped": "■"}


class WidgetView(LaunchView):
    def __init__(self, max_lines=400, interval=0.1):
        import ipywidgets

        self._widgets = ipywidgets
        self._max_lines = max_lines
        self.interval = interval
        self._lines, self._hidden, self._live, self.statuses = {}, {}, {}, {}
        self._metrics = []
        self._dirty = set()
        self._last_render = 0.0
        self.renders = 0
        self._launch = None

    # -- events (supervisor thread) ---------------------------------------------------------------

    def on_start(self, launch):
        w = self._widgets
        self._launch = launch
        ranks = launch.ranks
        for rank in ranks:
            self._lines[rank] = collections.deque(maxlen=self._max_lines)
            self._hidden[rank] = 0
            self._live[rank] = ""
            self.statuses[rank] = "starting"
        self.header = w.HTML()
        self.logs = {rank: w.HTML(log_html([])) for rank in ranks}
        self.tabs = w.Tab(children=[self.logs[rank] for rank in ranks])
        for index, rank in enumerate(ranks):
            self.tabs.set_title(index, f"rank {rank}")
        self.metrics_box = w.HTML(metrics_html({}))
        self.summary = w.HTML()
        self.root = w.VBox([self.header, self.tabs, self.metrics_box, self.summary])
        self._render_header()
        self._handle = _show(self.root, f"notebook_launcher: {len(ranks)} ranks running")

    def on_status(self, rank, status):
        self.statuses[rank] = status
        self._dirty.add("header")

    def on_output(self, rank, stream, text):
        lines = self._lines[rank]
        if len(lines) == lines.maxlen:
            self._hidden[rank] += 1
        lines.append((stream, text))
        self._live[rank] = ""
        self._dirty.add(rank)

    def on_live(self, rank, stream, text):
        if text != self._live[rank]:
            self._live[rank] = text
            self._dirty.add(rank)

    def on_metric(self, rank, metric):
        self._metrics.append({"rank": rank, **metric})
        self._dirty.add("metrics")

    def flush(self):
        wait = self.interval - (time.monotonic() - self._last_render)
        if wait > 0:
            return wait
        self._render()
        return 1.0  # come back to refresh the elapsed time

    def on_finish(self, launch):
        for rank in launch.ranks:
            self.statuses[rank] = launch.rank_status(rank)
        failed = launch.failed_rank
        if failed is not None and failed in self._lines:
            self._lines[failed].append(("stderr", _traceback_text(launch.exception)))
            self._dirty.add(failed)
            self.tabs.selected_index = launch.ranks.index(failed)
        self._dirty.add("header")
        self._render()
        text = summary_text(launch)
        self.summary.value = f"<b>{_SYMBOL.get(launch.status, '')} {_escape(text)}</b>"
        self._handle.update(_bundle(self.root, text), raw=True)

    # -- rendering ----------------------------------------------------------------------------------

    def _render(self):
        dirty, self._dirty = self._dirty, set()
        self._render_header()
        for rank in self._lines:
            if rank in dirty:
                self.logs[rank].value = log_html(list(self._lines[rank]), self._live[rank], self._hidden[rank])
        if "metrics" in dirty:
            self.metrics_box.value = metrics_html(series_by_key(self._metrics))
        self._last_render = time.monotonic()
        self.renders += 1

    def _render_header(self):
        launch = self._launch
        assert launch is not None, "on_start() runs first"
        plan = launch.plan
        self.header.value = (
            f"<b>notebook_launcher</b> · {len(launch.ranks)} ranks · {plan.device.name} · "
            f"{plan.start_method} · {launch.elapsed:.1f} s<br>{status_chips(self.statuses)}"
        )


def summary_text(launch):
    """One line: how the launch ended, how long it took, and what came back."""
    elapsed = f"{launch.elapsed:.1f} s"
    if launch.status == "failed":
        exc = launch.exception
        return f"failed after {elapsed}: {type(exc).__name__}: {exc}"
    if launch.status == "stopped":
        return f"stopped after {elapsed}"
    last = _last_metrics(launch.metrics)
    returned = type(launch.results[0]).__name__
    return f"succeeded in {elapsed}; rank {launch.ranks[0]} returned {returned}" + (f"; last {last}" if last else "")


def _last_metrics(metrics):
    latest = {}
    first_rank = min((record["rank"] for record in metrics), default=None)
    for record in metrics:
        if record["rank"] == first_rank:
            latest.update(record["values"])
    return ", ".join(f"{key} {value:.4g}" for key, value in latest.items())


def _traceback_text(exc):
    cause = getattr(exc, "__cause__", None)
    text = getattr(cause, "text", None) or getattr(exc, "remote_traceback", None) or ""
    return f"{text.rstrip()}\n{type(exc).__name__}: {exc}\n" if text else f"{type(exc).__name__}: {exc}\n"


def _escape(text):
    import html

    return html.escape(text)


def _bundle(widget, text):
    data = {"text/plain": text}
    model_id = getattr(widget, "model_id", None)
    if model_id:
        data["application/vnd.jupyter.widget-view+json"] = {
            "version_major": 2,
            "version_minor": 0,
            "model_id": model_id,
        }
    return data


def _show(widget, text):
    from IPython.display import display

    return display(_bundle(widget, text), raw=True, display_id=True)
