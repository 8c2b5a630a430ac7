"""Reusable daemon threads for launch supervisors.

ipykernel keeps one event pipe (an eventfd) for every thread that ever writes or flushes output,
and never closes it; a fresh thread per launch would leak a descriptor per launch (multiprocessing
flushes stdio before each fork, and the text view writes from the supervisor). Reusing threads
bounds that to one per concurrently running launch. A job that raises (even ``SystemExit``) is
reported on the real stderr and the thread goes back to the pool alive. The threads never exit, so the Linux
parent-death signal of the ranks they start fires only when the kernel itself dies.

Examples:
    >>> done = threading.Event()
    >>> run_in_thread(done.set)
    >>> done.wait(5)
    True
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import traceback

from ..interrupt_routing import kernel_thread

__all__ = ["run_in_thread"]

_idle: list[_PoolThread] = []
_lock = threading.Lock()


def run_in_thread(function):
    """Run ``function()`` on an idle pool thread, or on a new one when all are busy."""
    with _lock:
        thread = _idle.pop() if _idle else _PoolThread()
    thread.jobs.put(function)


class _PoolThread:
    def __init__(self):
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        kernel_thread(self._serve, name="notebook-launcher-supervisor")

    def _serve(self):
        while True:
            function = self.jobs.get()
            try:
                function()
            except BaseException:  # a job's failure must not end the thread: the pool would keep a dead one
                traceback.print_exc(file=sys.__stderr__)
            with _lock:
                _idle.append(self)


def _forget_threads_in_child():
    """A forked rank has none of the kernel's threads; it must not hand work to them."""
    _idle.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_threads_in_child)
