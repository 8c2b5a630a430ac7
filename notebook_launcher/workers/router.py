"""The view of a workers launch: each call's output goes to the cell that made the call.

The workers' launch outlives the cell that started it, so its events are routed: while a call runs,
what the called ranks write is shown in the calling cell (rank-prefixed lines, as ``display="text"``
shows a launch, kept by the saved notebook), and the ranks' replies are handed to the waiting call.
Views write from the supervisor's thread inside a copy of the calling cell's context, which is how
the kernel knows the lines belong to that cell. What ranks write between calls (a background
thread) is kept on the launch (``logs``) but shown nowhere.

Example:
    >>> router = CallRouter()
    >>> router.on_output(0, "stdout", "between calls\\n")   # no call running: kept, not shown
"""

from __future__ import annotations

import contextvars
import threading
from typing import Any

from ..frontend.views import LaunchView, TextView

__all__ = ["CallRouter", "Call"]


class Call:
    """One call to some ranks: their replies as they come, and the view showing their output."""

    def __init__(self, call_id: int, ranks: list[int], view: LaunchView) -> None:
        self.id = call_id
        self.ranks = ranks
        self.view = view
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
        self._launch: Any = None
        self.on_end: Any = None  # called (from the supervisor's thread) when the launch has ended
        self._forwarding = threading.Lock()

    def begin(self, call: Call) -> None:
        call.view.on_start(self._launch)
        self.call = call

    def end(self, call: Call) -> None:
        """On the calling cell's thread, once the call is answered (or abandoned)."""
        with self._forwarding:  # the supervisor's thread may be writing the call's last lines
            if self.call is call:
                self.call = None
        call.view.on_finish(self._launch)

    def _forward(self, rank: int, method: str, *args: Any) -> None:
        with self._forwarding:
            call = self.call
            if call is not None and rank in call.ranks:
                call.context.run(getattr(call.view, method), rank, *args)

    def on_start(self, launch: Any) -> None:
        self._launch = launch

    def on_output(self, rank: int, stream: str, text: str) -> None:
        self._forward(rank, "on_output", stream, text)

    def on_display(self, rank: int, index: int, replaced: bool) -> None:
        self._forward(rank, "on_display", index, replaced)

    def on_reply(self, rank: int, payload: Any) -> None:
        call = self.call
        if call is not None and payload.get("call") == call.id:
            call.add_reply(rank, payload)

    def flush(self) -> None:
        with self._forwarding:
            call = self.call
            if call is not None:
                call.context.run(call.view.flush)

    def on_finish(self, launch: Any) -> None:
        call = self.call
        if call is not None:
            with call.answered:
                call.answered.notify_all()
        if self.on_end is not None:
            self.on_end()


def text_view(line_prefix: str | None = None) -> TextView:
    """The view of one call: ``[rank N]`` lines in the calling cell."""
    return TextView(line_prefix=line_prefix)
