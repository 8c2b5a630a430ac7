"""A detached launch as a kernel sees it: a mirror of its journal that the launch views show.

``DetachedLaunch`` reads the launch's folder (``detached.folder``) on a thread of its own: the
journal's new lines go into a ``LaunchRecord`` of its own and to its view as the events a launch's
views get, and the end (``end.pkl``) becomes its status, results and failure. Any number of
kernels may follow one launch; none of them runs it, so a kernel's restart, an interrupt of the
cell that waits, or the page going away leave the launch running. ``stop()`` asks its host to stop
it, as the Stop button does.

Examples:
    >>> from notebook_launcher import launch
    >>> def train(epochs):
    ...     print("trained", epochs, "epochs")
    ...     return epochs
    >>> job = launch(train, (3,), num_processes=1, display="none", detach=True)  # doctest: +SKIP
    >>> job.wait(), job.logs(0)                                                   # doctest: +SKIP
    (3, 'trained 3 epochs\\n')
"""

from __future__ import annotations

import os
import pickle
import signal
import threading
from typing import Any

from ..errors import LaunchError, add_note
from ..interrupt_routing import wait_event
from ..launching.listener import Finished, LaunchListener, Shown, Started
from ..launching.reading import LaunchReading
from ..launching.record import LaunchRecord
from ..tracebacks import shown_as
from ..wire.events import Metric, Output, Status
from .folder import LaunchFolder, host_state
from .journal import JournalReader

__all__ = ["DetachedLaunch", "POLL_INTERVAL"]

POLL_INTERVAL = 0.1  # seconds between two reads of the journal while the launch runs


class DetachedLaunch(LaunchReading):
    """A launch run by a host process apart from this kernel (``launch(..., detach=True)``, ``attach()``)."""

    kind = "launch"
    reports_return_type = True
    cell: int | None = None
    attempt = 0
    waiting = ""
    last_stacks = None
    master_port = None

    def __init__(self, folder: LaunchFolder, plan: Any) -> None:
        self.id = folder.id
        self.plan = plan
        self.folder = folder
        self._record = LaunchRecord(plan.num_processes)
        self._reader = JournalReader(folder.file("journal.jsonl"))
        self._done = threading.Event()
        self._wake = threading.Event()
        self._ended = False
        self._waiters = 0
        self._stopping = False
        self._error: BaseException | None = None
        self._view: LaunchListener | None = None
        self._host: tuple[int, float] | None = None  # the host's pid and start time, once it said them

    def __repr__(self) -> str:
        return f"<DetachedLaunch {self.id}: {self.plan.num_processes} ranks, {self.status}, {self.folder.path}>"

    def follow(self, view: LaunchListener) -> DetachedLaunch:
        """Show the launch with ``view`` from its first line on, and keep following it until it ends."""
        self._view = view
        view.on_event(Started(self))
        self._catch_up(view)  # everything so far is shown before this returns, in the calling cell
        threading.Thread(target=self._follow, name=f"notebook-launcher-detached-{self.id}", daemon=True).start()
        return self

    # -- following ------------------------------------------------------------------------------

    def _follow(self) -> None:
        view = self._view
        assert view is not None
        try:
            while True:
                ended = not self._host_running()  # before the read: what it wrote before it ended is read
                self._catch_up(view)
                if ended:
                    break
                self._wake.wait(POLL_INTERVAL)
                self._wake.clear()
            self._take_end()
        finally:
            self._ended = True
            try:
                view.on_event(Finished(self))
            finally:
                self._done.set()

    def _catch_up(self, view: LaunchListener) -> None:
        for event in self._reader.apply(self._record):
            _tell(view, event)
        view.flush()

    def _host_running(self) -> bool:
        if self._host is None:  # once said, it never changes: read once, not at every poll
            self._host = self.folder.host()
        return self.folder.host_running(self._host)

    def _take_end(self) -> None:
        record = self._record
        try:
            end = pickle.loads(self.folder.read_bytes("end.pkl"))
        except FileNotFoundError:
            host = self.folder.host()
            pid = f" (pid {host[0]})" if host else ""
            self._error = LaunchError(
                f"detached launch {self.id}: its host process{pid} ended without an end (killed, or its"
                f" machine restarted); what it logged is in {self.folder.path}"
            )
            if host is not None:
                ended = end_what_it_started(*host)
                if ended:
                    add_note(self._error, f"{len(ended)} process(es) its ranks had started were ended: {ended}")
            record.add_failure(None, self._error, 0.0)
            record.finish()
            return
        for rank, value in end["results"].items():
            record.add_result(rank, value)
        error = end["error"]
        if error is not None:
            if end["text"]:
                add_note(error, f"as the detached launch's host raised it:\n{end['text'].rstrip()}")
            self._error = error
        if end["status"] == "stopped":
            record.mark_stopped()
        elif error is not None:
            record.add_failure(end["failed_rank"], error, 0.0)
        record.finish()

    # -- what a launch's views and users read ---------------------------------------------------

    @property
    def done(self) -> bool:
        return self._ended

    @property
    def waited_on(self) -> bool:
        return self._waiters > 0

    @property
    def stopping(self) -> bool:
        return self._stopping

    def place(self, rank: int) -> None:
        return None

    def stacks(self, timeout: float = 5.0) -> None:
        """Not taken for a detached launch (its ranks are another process's children): None."""
        return None

    def join(self, timeout: float | None = None) -> bool:
        """Wait until the launch has ended (at most ``timeout`` seconds); True once it has."""
        return wait_event(self._done, timeout)

    def wait(self, timeout: float | None = None) -> Any:
        """Wait for the launch to end and return rank 0's value, or raise what its host's ``wait()``
        raised. An interrupt stops the waiting, not the launch: it goes on, and ``attach()`` follows
        it again."""
        __tracebackhide__ = True
        self._waiters += 1
        try:
            finished = wait_event(self._done, timeout)
        except KeyboardInterrupt:
            message = (
                f"stopped waiting for detached launch {self.id}; it goes on (attach({self.id!r}) follows it"
                " again, .stop() ends it)"
            )
            raise shown_as(KeyboardInterrupt(message), line=f"KeyboardInterrupt: {message}") from None
        finally:
            self._waiters -= 1
        if not finished:
            raise TimeoutError(f"detached launch {self.id} still running after {timeout} s")
        if self._error is not None:
            raise self._error
        return self._record.results[0]

    def request_stop(self, by: str = "") -> None:
        """Ask the launch's host to stop it (its ranks' stacks taken, then SIGTERM, then SIGKILL)."""
        self._stopping = True
        if self._host_running() and self._host is not None:
            try:
                os.kill(self._host[0], signal.SIGINT)
            except ProcessLookupError:
                pass
        self._wake.set()

    def stop(self, timeout: float | None = None) -> bool:
        """Stop the launch and wait until it has ended (at most ``timeout`` seconds)."""
        self.request_stop()
        return wait_event(self._done, timeout)

    def forget(self) -> None:
        """Remove the ended launch's folder (its journal, result and log)."""
        if not self.done:
            raise LaunchError(f"detached launch {self.id} is still running: stop() it first")
        self.folder.remove()


def end_what_it_started(host_pid: int, started: float) -> list[int]:
    """End what the ranks of a host that died with its guardian left, as the guardian would have:
    the processes in the host's rank cgroups and those that carry its ranks' mark (``rank.marked``;
    returned, by pid), then the host's shared tensors and scratch files. Marks are left alone while
    another process has the host's pid (they could then be its launches'); the host itself, ended
    but not yet reaped by its parent, does not count."""
    from ..rank import containers
    from ..rank.marked import kernel_prefix, kill_marked
    from ..scratch import pid_alive, sweep_dead_kernels
    from ..wire.shared_tensors import sweep_dead_kernels as sweep_dead_tensors

    containers.sweep(pid_alive)
    ended = [] if host_state(host_pid, started) == "reused" else kill_marked(kernel_prefix(host_pid))
    sweep_dead_tensors()
    sweep_dead_kernels()
    return ended


def _tell(view: LaunchListener, event: dict) -> None:
    """Give ``view`` the event a launch's supervisor would have given it for a journal line."""
    _TELL[event["e"]](view, event)


def _tell_metric(view: LaunchListener, event: dict) -> None:
    metric = event["metric"]
    if "x" not in metric:  # the function's own: the host's samples of its ranks are no events
        view.on_event(Metric(metric["rank"], metric["time"], metric["values"], metric.get("step")))


_TELL = {
    "status": lambda view, event: view.on_event(Status(event["rank"], event["time"], event["status"])),
    "output": lambda view, event: view.on_event(Output(event["rank"], event["time"], event["stream"], event["text"])),
    "display": lambda view, event: view.on_event(Shown(event["rank"], event["index"], event["update"])),
    "metric": _tell_metric,
}
