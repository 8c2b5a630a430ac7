"""The view of a workers launch: each call's output goes to the cell that made the call.

The workers' launch outlives the cell that started it, so its events are routed: while a call runs,
what the called ranks write is shown in the calling cell, and the ranks' replies are handed to the
waiting call.
Each call is shown as a launch of its own (``call_record.CallLaunch``: the live widget while it
runs, then its static form, as ``display`` chooses). Views write from the supervisor's thread
inside a copy of the calling cell's context, which is how
the kernel knows the lines belong to that cell. What ranks write between calls (a background
thread) is kept on the launch (``logs``) but shown nowhere.

Examples:
    >>> router = CallRouter()
    >>> router.on_output(Output(0, 0.0, "stdout", "between calls\\n"))   # no call running: kept, not shown
"""

from __future__ import annotations

import contextvars
import dataclasses
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from ..frontend.views import LaunchView
from ..launching.listener import LaunchState, LiveLine, Metric, Output, Reply, Shown

__all__ = ["CallRouter", "Call"]

_T = TypeVar("_T")


class Call:
    """One call to some ranks: their replies as they come, and the view showing what they wrote
    (through ``handle``, the call seen as a launch of its own)."""

    def __init__(self, call_id: int, ranks: list[int], view: LaunchView, handle: Any) -> None:
        self.id = call_id
        self.ranks = ranks
        self.view = view
        self.handle = handle
        self.replies: dict[int, dict] = {}
        self.context = contextvars.copy_context()
        self.answered = threading.Condition()

    def add_reply(self, rank: int, payload: dict) -> None:
        with self.answered:
            self.replies[rank] = payload
            self.answered.notify_all()

    @property
    def complete(self) -> bool:
        return all(rank in self.replies for rank in self.ranks)


class CallRouter(LaunchView):
    """Feeds the running call's view and replies; the launch's only cell view."""

    def __init__(self) -> None:
        self.call: Call | None = None
        self._launch: LaunchState | None = None
        self.on_end: Any = None  # called (from the supervisor's thread) when the launch has ended
        self._forwarding = threading.Lock()

    @property
    def launch(self) -> LaunchState:
        """The launch shown (set by ``on_start``, which comes first)."""
        assert self._launch is not None, "on_start() comes first"
        return self._launch

    def begin(self, call: Call) -> None:
        call.view.on_start(call.handle)
        self.call = call

    def end(self, call: Call) -> None:
        """On the calling cell's thread, once the call is answered (or abandoned)."""
        with self._forwarding:  # the supervisor's thread may be writing the call's last lines
            if self.call is call:
                self.call = None
        call.view.on_finish(call.handle)

    def _called(self, rank: int) -> Call | None:
        """The running call, if ``rank`` takes part in it."""
        call = self.call
        return call if call is not None and rank in call.ranks else None

    def _show(self, call: Call, method: Callable[..., _T], *args: Any) -> _T | None:
        """``method`` (of the call's view) with ``args``, in the calling cell's context, if the call still runs."""
        with self._forwarding:
            if self.call is call:
                return call.context.run(method, *args)
        return None

    def on_start(self, launch: LaunchState) -> None:
        self._launch = launch

    def on_output(self, event: Output) -> None:
        call = self._called(event.rank)
        if call is not None:
            self._show(call, call.view.on_output, event)

    def on_live(self, event: LiveLine) -> None:
        call = self._called(event.rank)
        if call is not None:
            self._show(call, call.view.on_live, event)

    def on_display(self, event: Shown) -> None:
        call = self._called(event.rank)
        if call is not None:
            in_call = call.handle.index_in_call(event.rank, event.index)
            if in_call is not None:
                self._show(call, call.view.on_display, dataclasses.replace(event, index=in_call))

    def on_metric(self, event: Metric) -> None:
        call = self._called(event.rank)
        if call is not None:
            self._show(call, call.view.on_metric, event)

    def on_reply(self, event: Reply) -> None:
        call = self.call
        if call is not None and event.payload.get("call") == call.id:
            call.add_reply(event.rank, dict(event.payload))

    def flush(self) -> float | None:
        """The call's view's flush; returns when it wants to be called again (the widget's redraws)."""
        call = self.call
        return self._show(call, call.view.flush) if call is not None else None

    def on_finish(self, launch: LaunchState) -> None:
        call = self.call
        if call is not None:
            with call.answered:
                call.answered.notify_all()
        if self.on_end is not None:
            self.on_end()


def call_view(display: str, line_prefix: str | None = None) -> LaunchView:
    """The view of one call in the calling cell: the launch views' (widget and static form, or
    ``[rank N]`` text, or nothing), chosen as for a launch that its cell waits on (a quick call
    sends one output, its finished form)."""
    from ..frontend.views import select_view

    return select_view(display, line_prefix=line_prefix, show_at_start=False)  # the cell waits: one output
