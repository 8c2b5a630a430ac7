"""SIGINT during a call, on both ends: raised once as KeyboardInterrupt, every further one counted.

Inside a rank (``serve``) the call's code gets one KeyboardInterrupt however many SIGINTs arrive
(the kernel's interrupt can reach a rank both through the terminal's process group and from the
kernel). In the kernel (``Workers``) the first interrupt raises in the waiting cell and a second,
counted even while the first is being handled, stops the workers; one that comes while the call is
still being sent is counted, not raised (``armed=False``), and handled as the first once the kernel
waits. Outside the ``with`` block the previous handler is back.

Examples:
    >>> import os, signal
    >>> with CountedInterrupts() as interrupts:
    ...     try:
    ...         os.kill(os.getpid(), signal.SIGINT)
    ...     except KeyboardInterrupt:
    ...         os.kill(os.getpid(), signal.SIGINT)   # counted, not raised
    >>> interrupts.count
    2
"""

from __future__ import annotations

import signal
import threading
from typing import Any

__all__ = ["CountedInterrupts"]


class CountedInterrupts:
    """Counts SIGINTs inside the block; only an armed one raises (``rearm`` after handling one)."""

    def __init__(self, armed: bool = True) -> None:
        self.count = 0
        self._armed = armed
        self._previous: Any = None

    def __enter__(self) -> CountedInterrupts:
        if threading.current_thread() is threading.main_thread():  # only the main thread may set handlers
            self._previous = signal.signal(signal.SIGINT, self._on_sigint)
        return self

    def _on_sigint(self, signum: int, frame: Any) -> None:
        self.count += 1
        if self._armed:
            self._armed = False
            raise KeyboardInterrupt

    def rearm(self) -> None:
        self._armed = True

    def __exit__(self, *exc: Any) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
