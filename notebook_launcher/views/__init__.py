"""How a launch shows itself in the cell, behind one small interface, chosen once by ``select_view``.

A view gets ``on_start(launch)``, ``on_status(rank, status)``, ``on_output(rank, stream, text)``,
``on_metric(rank, metric)``, ``flush()`` and ``on_finish(launch)``, all from the launch's supervisor thread.

Example:
    >>> type(select_view("text")).__name__
    'TextView'
"""

from __future__ import annotations

from .base import LaunchView
from .text import TextView

__all__ = ["LaunchView", "TextView", "select_view", "DISPLAY_CHOICES"]

DISPLAY_CHOICES = ("auto", "text", "none")


def select_view(display="auto"):
    """The view for ``display``: "text" prints ``[rank N]`` lines, "none" shows nothing."""
    if display not in DISPLAY_CHOICES:
        raise ValueError(f"display={display!r} is not valid; use one of {', '.join(map(repr, DISPLAY_CHOICES))}")
    if display == "none":
        return LaunchView()
    return TextView()
