"""Inside a rank: the Python stack of every thread, as builtins, without stopping anything.

Taken by the rank's output thread (``capture``) when the kernel asks (``Launch.stacks()``): the
main thread may be blocked in a collective, but it released the GIL there, so its frames can be
read. The output thread leaves itself out; a thread that answers from a signal handler (it had
unblocked the signal) leaves out the frames of the answer.

Examples:
    >>> threads = collect_stacks()["threads"]
    >>> any(frame[2] == "collect_stacks" for thread in threads for frame in thread["frames"])
    True
"""

from __future__ import annotations

import os
import sys
import threading
import traceback

__all__ = ["collect_stacks"]

_HERE = os.path.dirname(os.path.abspath(__file__))
_BOOTSTRAP = os.path.join(_HERE, "bootstrap.py")
_CAPTURE = os.path.join(_HERE, "capture.py")  # its _answer_stacks tops a thread that answers from a handler


def collect_stacks(skip_ident: int | None = None) -> dict:
    """{"pid": ..., "threads": [{"name": ..., "frames": [[file, line, function, code], ...]}]}, outermost
    frame first, the main thread first."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    threads = []
    for ident, frame in sys._current_frames().items():
        if ident == skip_ident:
            continue
        frames = [
            [entry.filename, entry.lineno, entry.name, entry.line or ""] for entry in traceback.extract_stack(frame)
        ]
        start = next((i + 1 for i, entry in enumerate(frames) if entry[2] == "run_rank" and entry[0] == _BOOTSTRAP), 0)
        frames = frames[start:]  # the rank's own frames: the launcher's start-up above them is left out
        answer = next(
            (i for i, entry in enumerate(frames) if entry[2] == "_answer_stacks" and entry[0] == _CAPTURE), None
        )
        frames = frames[:answer]
        threads.append(
            {
                "name": names.get(ident, f"thread {ident}"),
                "frames": frames,
                "main": ident == threading.main_thread().ident,
            }
        )
    threads.sort(key=lambda thread: not thread["main"])
    return {"pid": os.getpid(), "threads": threads}
