"""The live widget's buttons and what they do: "Stacks" (where every running rank is now), "Save
log" (every line of every rank in a file next to the notebook), "Log as text" (the lines in a text
box, to copy) and "Stop"; and closing the widget once the launch has ended. A part of
``WidgetView`` (``widget.py``), which holds the launch and the widgets these read.

Example (in a kernel)::

    job = launch(train, num_processes=2)
    job.view.save_log()          # what "Save log" does: returns the file's path
"""

from __future__ import annotations

import html
import os
from typing import Any

from ...interrupt_routing import kernel_thread
from ..subshells import handle_where_sent
from .static import log_lines

__all__ = ["WidgetActions"]

_STACKS_TIP = "Where every running rank is now: the Python stack of each of its threads."
_SAVE_TIP = "Write every line of every rank to a file next to the notebook."
_TEXT_TIP = "Show the lines in a text box, to copy."
_STOP_TIP = "End every rank now (their stacks are taken first); the launch raises LaunchError."
_CLICKS_TIP = (
    " While a cell waits on this launch, JupyterLab and Notebook 7 (kernel subshells) take the click"
    " at once; other front ends only after the cell, so interrupt the kernel there instead."
)


class WidgetActions:
    """The buttons of ``WidgetView``; it sets ``launch``, the log boxes and the other widgets."""

    launch: Any
    all_box: Any
    boxes: dict
    style: Any
    header: Any
    tabs: Any
    metrics_box: Any
    charts: Any
    chart_controls: Any
    root: Any
    _max_lines: int
    _stacks_pending: bool
    _next_static: float

    def _build_actions(self, w: Any) -> None:
        """The row of buttons (``self.actions``), the stacks box, the "saved" note and the text log."""
        stacks = w.Button(description="Stacks", icon="list", tooltip=_STACKS_TIP + _CLICKS_TIP)
        self.stacks_box = w.HTML()
        stacks.on_click(lambda _button: self.take_stacks())
        save = w.Button(description="Save log", icon="download", tooltip=_SAVE_TIP + _CLICKS_TIP)
        as_text = w.Button(description="Log as text", icon="copy", tooltip=_TEXT_TIP + _CLICKS_TIP)
        self.stop_button = w.Button(description="Stop", icon="stop", tooltip=_STOP_TIP + _CLICKS_TIP)
        self.saved = w.HTML()
        self.text_log = w.Textarea(layout=w.Layout(width="100%", height="240px", display="none"))
        save.on_click(lambda _button: self.save_log())
        as_text.on_click(lambda _button: self._toggle_text())
        self.stop_button.on_click(lambda _button: self.stop())
        for button in (stacks, save, as_text, self.stop_button):
            handle_where_sent(button)
        self.actions = w.HBox([stacks, save, as_text, self.stop_button, self.saved])
        self.actions.add_class("nl-actions")  # a narrow output wraps the buttons instead of cutting their text

    def take_stacks(self) -> None:
        """Ask every running rank for its stacks (on a thread of its own: ranks get up to 5 s to answer);
        the widget and the static form show them at the next redraw."""

        def take() -> None:
            self.launch.stacks()
            self._stacks_pending = True
            self._next_static = 0.0  # the saved form gets them too, at the next flush

        kernel_thread(take, name="notebook-launcher-stacks")

    def stop(self) -> None:
        """End the launch (the Stop button): every rank's stacks are taken, then the ranks end."""
        self.stop_button.disabled = True
        self.stop_button.description = "Stopping…"
        self.launch.request_stop(by="its Stop button")

    def save_log(self, directory: str = ".") -> str:
        """Write every line of every rank to ``notebook_launcher-<id>.log``; returns its path."""
        path = os.path.join(directory, f"notebook_launcher-{self.launch.id}.log")
        with open(path, "w", encoding="utf-8") as file:
            file.writelines(log_lines(self.launch.interleaved()))
        name = html.escape(os.path.basename(path))
        folder = html.escape(os.path.abspath(directory))
        self.saved.value = f'saved <a href="{name}" target="_blank">{name}</a> in {folder}'
        return path

    def _toggle_text(self) -> None:
        if self.text_log.layout.display == "none":
            self.text_log.value = "".join(log_lines(self.launch.interleaved(last=self._max_lines)))
            self.text_log.layout.display = None
        else:
            self.text_log.layout.display = "none"

    def close(self) -> None:
        """Empty and close every widget (the output already shows the static form)."""
        for box in (self.all_box, *self.boxes.values()):
            box.close()
        self.chart_controls.close()
        for widget in (self.style, self.header, self.metrics_box, self.stacks_box, self.saved, self.text_log):
            widget.value = ""
        for widget in (
            self.style,
            self.header,
            self.tabs,
            self.metrics_box,
            self.charts,
            self.stacks_box,
            self.saved,
            self.text_log,
            *self.actions.children,
            self.actions,
            self.root,
        ):
            widget.close()
