"""The base of the views: a ``LaunchListener`` (``launching.listener``) that shows nothing
(``display="none"``).

A view receives ``on_start(launch)`` from the cell's thread, the rank events (``on_status``,
``on_output``, ``on_live``, ``on_display``, ``on_metric``, ``flush``) from the supervisor's thread,
and ``on_finish(launch)`` once the launch has ended and been cleaned up; ``launch`` is a
``LaunchState``.
"""

from __future__ import annotations

from typing import Any

from ...launching.listener import LaunchListener, LaunchState


class LaunchView:
    """Receives a launch's events from its supervisor thread. Override what you show."""

    def on_start(self, launch: LaunchState) -> None:
        pass

    def on_status(self, rank: int, status: str) -> None:
        pass

    def on_output(self, rank: int, stream: str, text: str) -> None:
        """Complete lines a rank wrote (one or many, each ending with a newline)."""

    def on_metric(self, rank: int, metric: dict) -> None:
        pass

    def on_live(self, rank: int, stream: str, text: str) -> None:
        """The line a rank is still writing (a progress bar's latest frame); "" when none."""

    def on_display(self, rank: int, index: int, replaced: bool) -> None:
        """A rank called ``display()``: entry ``index`` of its log (``launch.line(rank, index)``) is
        new, or (``replaced``) an update of a display shown before."""

    def flush(self) -> float | None:
        """Called after each batch of events, so output is shown in chunks, not line by line.

        Returns None, or seconds after which the view wants to be called again even without events
        (to show what it held back, or to refresh an elapsed time).
        """
        return None

    def on_reply(self, rank: int, payload: Any) -> None:
        """A persistent worker answered a call (``workers``); views of launches ignore it."""

    def on_finish(self, launch: LaunchState) -> None:
        pass


class CompositeView(LaunchView):
    """Several views fed the same events (the cell's view, and the kernel's launch observers)."""

    def __init__(self, *views: LaunchListener) -> None:
        self.views = views

    def on_start(self, launch: LaunchState) -> None:
        for view in self.views:
            view.on_start(launch)

    def on_status(self, rank: int, status: str) -> None:
        for view in self.views:
            view.on_status(rank, status)

    def on_output(self, rank: int, stream: str, text: str) -> None:
        for view in self.views:
            view.on_output(rank, stream, text)

    def on_live(self, rank: int, stream: str, text: str) -> None:
        for view in self.views:
            view.on_live(rank, stream, text)

    def on_display(self, rank: int, index: int, replaced: bool) -> None:
        for view in self.views:
            view.on_display(rank, index, replaced)

    def on_metric(self, rank: int, metric: dict) -> None:
        for view in self.views:
            view.on_metric(rank, metric)

    def on_reply(self, rank: int, payload: Any) -> None:
        for view in self.views:
            view.on_reply(rank, payload)

    def flush(self) -> float | None:
        delays = [delay for delay in (view.flush() for view in self.views) if delay is not None]
        return min(delays) if delays else None

    def on_finish(self, launch: LaunchState) -> None:
        for view in self.views:
            view.on_finish(launch)
