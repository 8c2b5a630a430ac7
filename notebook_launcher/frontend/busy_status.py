"""The kernel reads "Busy" for as long as a cell waits on a launch.

A front end shows the kernel's state from the last ``status`` message on IOPub, whatever request it
answers. While a launch cell runs, JupyterLab and Notebook 7 open a kernel subshell for the live
widget (a ``create_subshell_request`` on the control channel) and send its clicks there; each such
request ends with an "idle" status, and the status bar then says Idle until the cell ends, so a
person, or a script waiting for Idle, takes the kernel as free. ``BusyWhileWaiting`` follows every
"idle" published by another thread while the cell waits with a "busy" for the waiting cell's own
request: the requests still get their "idle" (front ends wait for it), and the kernel's last word is
the truth again.

Example (in a kernel, on the cell's thread)::

    busy = BusyWhileWaiting.for_this_cell()
    ...                # the cell waits; clicks and subshells come and go
    busy.stop()
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["BusyWhileWaiting"]


class BusyWhileWaiting:
    """While it is on, an "idle" that another thread publishes is followed by "busy" for ``parent``."""

    def __init__(self, kernel: Any, parent: dict) -> None:
        self._kernel = kernel
        self._parent = parent
        self._thread = threading.get_ident()
        self._own = vars(kernel).get("_publish_status")  # set on the kernel by someone else, kept
        self._original = kernel._publish_status
        kernel._publish_status = self._publish

    @classmethod
    def for_this_cell(cls) -> BusyWhileWaiting | None:
        """On for the cell running on this thread; None outside an ipykernel cell, or where the kernel
        publishes its status in a way this does not know."""
        try:
            from IPython import get_ipython

            kernel = getattr(get_ipython(), "kernel", None)
            publish = getattr(kernel, "_publish_status", None)
            parent = kernel.get_parent("shell") if callable(publish) else None  # type: ignore[union-attr]
        except Exception:  # not a kernel we know: nothing to correct
            return None
        if not parent or parent.get("header", {}).get("msg_type") != "execute_request":
            return None
        return cls(kernel, parent)

    def _publish(self, status: str, channel: str, parent: Any = None) -> None:
        self._original(status, channel, parent)
        if status == "idle" and threading.get_ident() != self._thread:
            self._original("busy", "shell", self._parent)

    def stop(self) -> None:
        """Off: the kernel publishes as it did (the cell's own "idle" comes next)."""
        if vars(self._kernel).get("_publish_status") != self._publish:
            return  # replaced since: theirs stays
        if self._own is None:
            del self._kernel._publish_status
        else:
            self._kernel._publish_status = self._own
