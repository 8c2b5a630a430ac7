"""A rank's ``display()`` reaches its tab and the static form, with or without an IPython shell.

A forked rank holds a copy of the kernel's shell; its display publisher is pointed at the channel
(``notebook.make_safe``). A spawned rank (and the start server's, the workers' and torch_xla's
ranks) is a fresh interpreter with no shell, where IPython's ``display()`` would only print
``<IPython.core.display.HTML object>`` and ``display_id=True`` would return None. There,
``route_displays_without_a_shell`` replaces IPython's ``display`` once the rank imports it: objects
are formatted by IPython's own formatters (a matplotlib figure as a PNG) and sent as display
events, so rich displays, ``display_id`` handles and their updates behave as under fork.

Example (what the bootstrap arranges, before the user's function runs)::

    route_displays_without_a_shell(channel)
    from IPython.display import HTML, display
    handle = display(HTML("<b>step 1</b>"), display_id=True)   # shown in the rank's tab
    handle.update(HTML("<b>step 2</b>"))                        # replaces it
"""

from __future__ import annotations

import sys
import uuid
from typing import Any

from ..import_hooks import after_import
from ..wire import DISPLAY
from ..wire.mime import as_text
from .capture import flush_output, wait_until_read

__all__ = ["send_display", "route_displays_without_a_shell", "DISPLAYED_MIME_TYPES", "WIDGETS_REFUSED"]

WIDGETS_REFUSED = (
    "widgets cannot be shown from inside a launched rank (it has no connection to the notebook);"
    " print, or log metrics with accelerator.log(...), and the launch shows them"
)
DISPLAYED_MIME_TYPES = ("text/plain", "text/html", "text/markdown", "image/png", "image/jpeg", "image/svg+xml")
_WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
# the modules through which code reaches IPython's display(): each keeps its own reference to it
_DISPLAY_MODULES = ("IPython.core.display_functions", "IPython.core.display", "IPython.display")


def send_display(channel: Any, data: dict, display_id: str | None, update: bool) -> None:
    """Send one mime bundle to the kernel after the output printed before it (widgets refused);
    a bundle with nothing the launch shows (empty: an object that displayed itself through
    ``_ipython_display_``) is not sent."""
    if _WIDGET_MIME in data:
        bundle = {"text/plain": f"<{WIDGETS_REFUSED}>"}
    else:
        bundle = {key: as_text(value) for key, value in data.items() if key in DISPLAYED_MIME_TYPES}
    if not bundle:
        return
    flush_output()  # what was printed before the display comes before it
    wait_until_read()
    channel.send(DISPLAY, {"data": bundle, "display_id": display_id, "update": bool(update)})


def route_displays_without_a_shell(channel: Any) -> None:
    """In a rank with no IPython shell, IPython's ``display`` (wherever the rank imports it from)
    sends display events and ``clear_output`` clears nothing; a rank with a shell keeps the shell's
    own, already routed."""
    display = _ShelllessDisplay(channel)
    for name in _DISPLAY_MODULES:
        after_import(name, lambda module: _replace_display(module, display))


def _replace_display(module: Any, display: _ShelllessDisplay) -> None:
    shell_class = getattr(sys.modules.get("IPython.core.interactiveshell"), "InteractiveShell", None)
    if shell_class is not None and shell_class.initialized():  # (not yet defined while IPython loads)
        return
    if hasattr(module, "display"):
        module.display = display
    if hasattr(module, "clear_output"):
        module.clear_output = _keep_output


def _keep_output(wait: bool = False) -> None:
    """``clear_output`` in a rank: nothing is cleared (the rank's log keeps every line and display,
    as under fork). Without a shell, IPython's would write erase codes to both streams."""


class _ShelllessDisplay:
    """IPython's ``display()`` signature, sending what it formats through the rank's channel."""

    def __init__(self, channel: Any) -> None:
        self._channel = channel
        self._formatter: Any = None

    def __call__(
        self,
        *objs: Any,
        include: Any = None,
        exclude: Any = None,
        metadata: Any = None,
        transient: Any = None,
        display_id: Any = None,
        raw: bool = False,
        clear: bool = False,
        update: bool = False,
        **kwargs: Any,
    ) -> Any:
        if display_id is True:
            display_id = uuid.uuid4().hex
        elif display_id is None:
            display_id = (transient or {}).get("display_id")
        for obj in objs:
            data = obj if raw else self._format(obj, include, exclude)
            send_display(self._channel, data, display_id, update)
        if display_id and not update:
            from IPython.display import DisplayHandle  # (IPython 7 has no display_functions)

            return DisplayHandle(display_id)
        return None

    def _format(self, obj: Any, include: Any, exclude: Any) -> dict:
        if self._formatter is None:
            from IPython.core.formatters import DisplayFormatter

            self._formatter = DisplayFormatter()
            png = self._formatter.formatters["image/png"]
            png.for_type_by_name("matplotlib.figure", "Figure", _figure_png)  # the inline backend's job
        data, _metadata = self._formatter.format(obj, include=include, exclude=exclude)
        return data


def _figure_png(figure: Any) -> bytes | None:
    from IPython.core.pylabtools import print_figure

    return print_figure(figure, "png")
