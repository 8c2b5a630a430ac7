"""A view's last form, shown by the cell that waits for the launch instead of the supervisor.

A cell blocked in ``notebook_launcher`` shows a quick launch's output once, in its final form, made
on the supervisor's thread as the launch ends. Sent from there, the cell's thread was woken only
after the display message had gone to ipykernel; handed to the waiting cell's thread, it is sent
there just before the call returns. First measured as 0.7-0.8 ms off a no-op 2-rank launch's
median (150-round medians, twice); 2000 paired rounds put it at -0.14 ms (95% interval -0.43 to
+0.15): no measurable gain, kept because it is correct and tested.

Whatever ends the cell's wait (the launch's end, an interrupt, a timeout), the cell shows what was
left for it as it stops waiting; a form made after that is shown at once by the thread that made it.

Example::

    handoff = CellHandoff(show)
    handoff.cell_waits(True)      # the cell's thread, before it waits
    handoff.show(bundle)          # the supervisor's thread: left for the cell, which waits
    handoff.cell_waits(False)     # the cell's thread, whatever ended its wait: show(bundle) runs here
"""

from __future__ import annotations

import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

__all__ = ["CellHandoff"]


class CellHandoff:
    """Shows a form (``show(bundle)``) now, or leaves it for the waiting cell's thread."""

    def __init__(self, show: Callable[[Any], None]) -> None:
        self._show = show
        self._lock = threading.Lock()
        self._waiting = False
        self._left: Any = None

    def cell_waits(self, waiting: bool) -> None:
        """The cell's thread starts (True) or stops (False) waiting; stopping, it shows what was
        left for it. A failure to show is printed to the kernel's stderr, not raised: the cell's
        result or error is what the call must end with."""
        with self._lock:
            self._waiting = waiting
            left, self._left = self._left, None
        if left is not None:
            try:
                self._show(left)
            except Exception:  # as the supervisor treats a failing view: the launch's outcome comes first
                traceback.print_exc(file=sys.__stderr__)

    def show(self, bundle: Any, leave_for_cell: bool = True) -> None:
        """Show ``bundle``, or leave it for the cell when the cell waits (and ``leave_for_cell``)."""
        with self._lock:
            if self._waiting and leave_for_cell:
                self._left = bundle
                return
        self._show(bundle)
