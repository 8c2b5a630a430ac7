"""How a launch shows itself in the cell, behind one small interface, chosen once by ``select_view``.

A view gets ``on_start(launch)``, ``on_status``, ``on_output``, ``on_live``, ``on_display``,
``on_metric``, ``flush()`` and ``on_finish(launch)``; all but ``on_start`` come from the launch's
supervisor thread.

Examples:
    >>> type(select_view("text")).__name__
    'TextView'
"""

from __future__ import annotations

import os
import sys

from ...choices import DISPLAYS, check_choice
from .base import LaunchView
from .text import TextView

__all__ = ["LaunchView", "TextView", "select_view"]


def select_view(display="auto", line_prefix=None, show_at_start=True):
    """The view for ``display``; ``line_prefix`` is the template of the text view's line prefix;
    ``show_at_start=False``: the widget's output may wait until there is something to show (the
    caller blocks on the launch, so no other output of the cell can come first).

    "widget" is the live widget, "text" prints ``[rank N]`` lines, "none" shows nothing. "auto" is
    the widget inside a Jupyter kernel with ipywidgets, text elsewhere; the environment variable
    ``NOTEBOOK_LAUNCHER_DISPLAY`` overrides "auto" (headless runs set it to "text").
    """
    check_choice("display", display, DISPLAYS)
    if display == "auto":
        display = _auto_display(os.environ.get("NOTEBOOK_LAUNCHER_DISPLAY"))
    return _VIEWS[display](line_prefix, show_at_start)


def _widget_view(line_prefix, show_at_start):
    if not _widgets_possible():
        raise ValueError("display='widget' needs a Jupyter kernel with ipywidgets installed; use 'text'")
    from .widget import WidgetView

    return WidgetView(show_at_start=show_at_start)


# One per name of ``choices.DISPLAYS`` but "auto".
_VIEWS = {
    "widget": _widget_view,
    "text": lambda line_prefix, show_at_start: TextView(line_prefix=line_prefix),
    "none": lambda line_prefix, show_at_start: LaunchView(),
}


def _auto_display(forced):
    if forced in _VIEWS:
        return forced
    return "widget" if _widgets_possible() else "text"


def _widgets_possible():
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None or not hasattr(shell, "kernel"):
        return False
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True
