"""A started rank as the supervisor sees it: a pid, a descriptor to wait on, an exit code."""

from __future__ import annotations

import os


class WorkerProcess:
    """One rank's process.

    ``sentinel`` becomes readable when the process exits. It is a pidfd where Linux has them, which
    fires exactly at the rank's exit even if the rank forked children (DataLoader workers) that
    still hold the start method's own sentinel pipe; elsewhere the start method's sentinel.
    """

    def __init__(self, pid, fallback_sentinel):
        self.pid = pid
        self._pidfd = _open_pidfd(pid)
        self.sentinel = self._pidfd if self._pidfd is not None else fallback_sentinel

    def poll(self):
        """The exit code once the process has ended (negative: killed by that signal), else None."""
        raise NotImplementedError

    def wait(self, timeout=None):
        """Block until the process ends (at most ``timeout`` seconds); its exit code, or None."""
        raise NotImplementedError

    def release(self):
        """Reap the ended process and close every descriptor held for it."""
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


def _open_pidfd(pid):
    if not hasattr(os, "pidfd_open"):
        return None
    try:
        return os.pidfd_open(pid)
    except OSError:  # old kernel without pidfd support
        return None
