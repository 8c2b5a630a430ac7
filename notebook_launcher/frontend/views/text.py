"""Rank-prefixed text in the cell: ``[rank 1] epoch 0: loss 0.31``; stderr lines go to stderr.

The streams are taken when the view is made, on the thread that runs the cell; the supervisor
thread writes to them from a copy of that thread's context, which is how ipykernel 7 knows the
lines belong to the launching cell even after the cell has returned. A rank's ``display()`` shows
as its text; a display updated in place (a progress table) is printed again at most every
``UPDATE_EVERY`` seconds, and its last version when the launch ends. The kernel's two streams batch
apart, so when the stream written to changes, the other is flushed first: a rank's stdout and stderr
lines reach the cell in the order the rank wrote them.
"""

from __future__ import annotations

import sys
import time

from ...launching.listener import LaunchState
from .base import LaunchView

UPDATE_EVERY = 10.0


def line_prefix(template, rank, local_rank=None):
    """The prefix of a rank's printed lines: ``[rank N] `` or torchrun's ``log_line_prefix_template``.

    Examples:
        >>> line_prefix(None, 1), line_prefix("{role_name}/{rank}: ", 1)
        ('[rank 1] ', 'default/1: ')
    """
    if template is None:
        return f"[rank {rank}] "
    return template.format(rank=rank, local_rank=rank if local_rank is None else local_rank, role_name="default")


class TextView(LaunchView):
    def __init__(self, stdout=None, stderr=None, line_prefix=None):
        self._streams = {"stdout": stdout or sys.stdout, "stderr": stderr or sys.stderr}
        self._template = line_prefix
        self._launch: LaunchState | None = None
        self._printed = {}  # (rank, index) of an updated display -> when it was last printed
        self._pending = set()
        self._last_stream = "stdout"

    @property
    def launch(self) -> LaunchState:
        """The launch shown (set by ``on_start``, which comes first)."""
        assert self._launch is not None, "on_start() comes first"
        return self._launch

    def on_start(self, launch):
        self._launch = launch

    def on_output(self, event):
        self._write(event.rank, event.stream, event.text)

    def _write(self, rank, stream, text):
        prefix = line_prefix(self._template, rank)
        body = text[:-1] if text.endswith("\n") else text
        if stream != self._last_stream:
            self._streams[self._last_stream].flush()
            self._last_stream = stream
        self._streams[stream].write(prefix + body.replace("\n", "\n" + prefix) + "\n")

    def on_display(self, event):
        key = (event.rank, event.index)
        if event.replaced and time.monotonic() - self._printed.get(key, 0.0) < UPDATE_EVERY:
            self._pending.add(key)
            return
        self._print_display(key)

    def _print_display(self, key):
        rank, index = key
        self._printed[key] = time.monotonic()
        self._pending.discard(key)
        self._write(rank, "stdout", self.launch.line(rank, index).text)

    def flush(self):
        for out in self._streams.values():
            out.flush()

    def on_finish(self, launch):
        for key in sorted(self._pending):
            self._print_display(key)
        self.flush()
