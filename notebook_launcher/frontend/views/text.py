"""Rank-prefixed text in the cell: ``[rank 1] epoch 0: loss 0.31``; stderr lines go to stderr.

The streams are taken when the view is made, on the thread that runs the cell; the supervisor
thread writes to them from a copy of that thread's context, which is how ipykernel 7 knows the
lines belong to the launching cell even after the cell has returned.
"""

from __future__ import annotations

import sys

from .base import LaunchView


class TextView(LaunchView):
    def __init__(self, stdout=None, stderr=None):
        self._streams = {"stdout": stdout or sys.stdout, "stderr": stderr or sys.stderr}

    def on_output(self, rank, stream, text):
        out = self._streams[stream]
        out.write(f"[rank {rank}] {text}")
        if not text.endswith("\n"):
            out.write("\n")

    def flush(self):
        for out in self._streams.values():
            out.flush()
