"""One-line notices the kernel prints after a cell, where the user would otherwise be misled.

An interrupt stops the cell that is running. A launch that runs in the background (``launch()``
returned, no cell waits on it) keeps running: after an interrupted cell, say so, and how to stop it.

Example (in a kernel; registered when the package is imported)::

    register(get_ipython())
"""

from __future__ import annotations

import sys
from typing import Any

from ..launching.handle import active_launches

__all__ = ["register"]

_registered: list[Any] = []


def register(ipython: Any) -> None:
    if ipython is None or ipython in _registered:
        return
    ipython.events.register("post_run_cell", _after_cell)
    _registered.append(ipython)


def _after_cell(result: Any) -> None:
    # an interrupt between a cell's statements (while IPython compiles the next) is an error "before exec"
    errors = (getattr(result, "error_in_exec", None), getattr(result, "error_before_exec", None))
    if not any(isinstance(error, KeyboardInterrupt) for error in errors):
        return
    # persistent workers run between cells on purpose (their interrupted cell says so itself)
    running = [launch for launch in active_launches() if not launch.waited_on and launch.kind != "workers"]
    for launch in running:
        if launch.stopping:
            print(
                f"notebook_launcher: launch {launch.id} is still ending: its ranks were told to stop and are"
                f" killed within {launch.plan.grace_period:g} s",
                file=sys.stderr,
            )
            continue
        print(
            f"notebook_launcher: launch {launch.id} is still running in the background: the interrupt stopped"
            f" this cell, not the launch. End it with .stop() on its handle, or the sidebar's Stop.",
            file=sys.stderr,
        )
    if running:
        # ipykernel sends a stream's text from its IO thread: flushed here, it goes out before the
        # cell's "idle", so a front end that stops listening to the cell then still has the notice
        sys.stderr.flush()
