"""The ``Launch`` handle: a running or finished launch, returned at once by ``launch()``.

Examples:
    >>> from notebook_launcher import launch
    >>> def train(epochs):
    ...     print("trained", epochs, "epochs")
    ...     return epochs
    >>> job = launch(train, args=(3,), num_processes=2, display="none")   # returns at once
    >>> job.wait()                                       # rank 0's return value, or its exception
    3
    >>> job.status, job.logs(1)                          # while running: "running", the output so far
    ('succeeded', 'trained 3 epochs\\n')
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..errors import LaunchError, add_note
from ..interrupt_routing import wait_event
from ..tracebacks import shown_as
from .delivery import DeliveredListener
from .elastic_compat import also_child_failed
from .listener import CellWaits, CompositeListener, Finished, GuardedListener, LaunchListener, Started
from .reading import LaunchReading
from .record import LaunchRecord
from .registry import Observed, active_launches, find_launch, last_launch, observe_launches, register
from .restarts import attempts_note, may_restart, restart_delay
from .stacks import where_they_were
from .supervisor import Supervisor

if TYPE_CHECKING:
    from ..backends.base import Place, Starter
    from ..backends.plans import LaunchPlan
    from .stacks import Stacks

__all__ = ["Launch", "active_launches", "observe_launches", "find_launch", "last_launch"]


def _execution_count() -> int | None:
    """The number of the cell running now ("In [N]"), or None outside IPython.

    IPython counts the cell before running it, so the running cell is ``execution_count - 1``.
    """
    import sys

    ipython = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    count = getattr(ipython, "execution_count", None)
    return count - 1 if isinstance(count, int) and count > 1 else None


class Launch(LaunchReading):
    """One launch of ``function`` on ``num_processes`` ranks (and its restarts, with ``max_restarts``).

    Attributes:
        id: a short id for this launch.
        plan: the checked ``LaunchPlan`` it runs.
        cell: the number of the cell that started it (``In [N]``), or None.
        kind: "launch", or "workers" for persistent workers (the sidebar shows it); set when it is
            made, so its observers hear it from its start.
    """

    reports_return_type = True  # the summary names the type rank 0 returned

    def __init__(
        self,
        plan: LaunchPlan,
        starter: Starter,
        view: LaunchListener,
        make_starter: Callable[[], Starter] | None = None,
        listeners: Iterable[Any] = (),
        kind: str = "launch",
    ) -> None:
        self.id = os.urandom(4).hex()  # not uuid4: its object costs a launch ~0.1 ms of copied pages
        self.plan = plan
        self.kind = kind
        self._raised: tuple[BaseException, BaseException] | None = None  # a failure, and the exception raised for it
        self.cell = _execution_count()
        self._view = view
        self._waiters = 0
        self._made_on = threading.get_ident()  # a wait on this thread is the cell's (``cell_waits``)
        self._observed = Observed()
        self._record = LaunchRecord(plan.num_processes, plan.global_rank(0))
        self._listener = CompositeListener(
            view, self._observed, *(DeliveredListener(GuardedListener(each)) for each in listeners)
        )
        self._make_starter = make_starter
        self._stopping = False
        self._stop_asked = threading.Event()  # set with _stopping: ends a wait between two attempts
        self._stopped_by = ""  # who asked, for the error: "its Stop button", "the sidebar"
        self._ended = False
        self._done = threading.Event()
        self._future: concurrent.futures.Future = concurrent.futures.Future()
        self._future.set_running_or_notify_cancel()  # a launch is stopped with stop(), not cancelled
        self._started_at = time.monotonic()  # ``timeout`` bounds the launch, restarts included
        # a stop and the switch to the next attempt must not cross: a stop lost between two attempts
        # would let the launch go on in the background
        self._attempt_lock = threading.Lock()
        self._supervisor = self._new_attempt(starter, 0)

    def _new_attempt(self, starter: Starter, attempt: int) -> Supervisor:
        return Supervisor(
            self.plan, starter, self._record, self._listener, self._attempt_done, attempt, self._started_at
        )

    def start(self) -> Launch:
        """Start the ranks (in the background) and return self."""
        register(self)
        self._listener.on_event(Started(self))
        self._supervisor.start()
        return self

    def subscribe(self, listener: Any) -> Callable[[], None]:
        """Call ``listener``'s methods (any of ``LaunchListener``'s: ``on_status``, ``on_output``,
        ``on_metric``, ``on_finish``, ...) with this launch's events from now on; returns the
        function that stops it.

        It gets ``on_start(launch)`` at once (what ran before can be read from the launch), and
        ``on_finish(launch)`` once, even when the launch has already ended. It is called on a thread
        of its own, in order (``DeliveredListener``): one that blocks never stalls the launch, and
        is reported; one that raises is reported in the launching cell and dropped; the launch goes on.

        Examples:
            >>> from notebook_launcher import launch
            >>> class Lines:
            ...     def __init__(self):
            ...         self.seen = []
            ...     def on_output(self, event):
            ...         self.seen.append((event.rank, event.text))
            >>> job = launch(print, args=("hello",), num_processes=2, display="none")
            >>> lines = Lines(); stop = job.subscribe(lines)
            >>> _ = job.wait()
            >>> stop()
        """
        delivered = DeliveredListener(GuardedListener(listener))
        delivered.on_event(Started(self))
        self._listener.add(delivered)
        if self._ended:  # ended meanwhile: its on_finish may have gone to the listeners before this one
            delivered.on_event(Finished(self))

        def unsubscribe() -> None:
            self._listener.remove(delivered)
            delivered.close()

        return unsubscribe

    @property
    def attempt(self) -> int:
        """Restarts so far (0 for the first attempt)."""
        return self._supervisor.attempt

    @property
    def waiting(self) -> str:
        """What the launch waits for now ("waiting for 1 more node(s) to join ...", "waiting for rank 1:
        another rank returned 40 s ago"), or ""."""
        return self._record.waiting

    def place(self, rank: int) -> Place | None:
        """Where ``rank`` runs (a ``Place``: node and address) when the ranks are on a cluster, else None."""
        return self._record.places.get(rank)

    @property
    def master_port(self) -> int | None:
        """The port of the ranks' rendezvous store in the current attempt (None before it is open)."""
        return self._supervisor.master_port

    def _attempt_done(self) -> None:
        """An attempt ended (on its supervisor's thread): start the next one, or finish the launch."""
        record, attempt = self._record, self._supervisor.attempt
        failure = record.failure
        if failure is not None and may_restart(self.plan.faults, failure, attempt, self._started_at, time.monotonic()):
            # back off before a restart; a stop asked meanwhile ends the wait (and the launch)
            self._stop_asked.wait(restart_delay(self.plan.faults, attempt, self._started_at, time.monotonic()))
        with self._attempt_lock:
            restart = (
                failure is not None
                and not self._stopping
                and may_restart(self.plan.faults, failure, attempt, self._started_at, time.monotonic())
            )
            if restart and failure is not None:
                reason = f"rank {record.failed_rank} failed: {type(failure).__name__}: {failure}"
                try:
                    assert self._make_starter is not None, "a launch that may restart knows how to make a starter"
                    starter = self._make_starter()
                    record.begin_attempt(attempt + 1, self.plan.faults.max_restarts, reason)
                    self._supervisor = self._new_attempt(starter, attempt + 1)
                except Exception as err:  # the restart itself failed: the launch ends with the failure it had
                    add_note(failure, f"the restart failed: {type(err).__name__}: {err}")
                    restart = False
        if restart:
            self._observed.changed()
            self._supervisor.start()
            return
        if failure is not None and record.past_failures:
            add_note(failure, attempts_note(record.past_failures, attempt, record.failed_rank, failure))
        record.finish()
        self._ended = True  # done from here on (the views' on_finish sees it); wait() returns after them
        try:
            self._listener.on_event(Finished(self))
        finally:
            exception = self._ending_exception()
            if exception is None:
                self._future.set_result(record.results[0])
            else:
                self._future.set_exception(exception)
            self._done.set()

    def __repr__(self) -> str:
        return (
            f"<Launch {self.id}: {self.plan.num_processes} ranks, {self.plan.start_method},"
            f" {self.plan.device.name}, {self.status}>"
        )

    @property
    def waited_on(self) -> bool:
        """True while a cell is blocked in ``wait()`` on this launch (Stop then interrupts the kernel)."""
        return self._waiters > 0

    @property
    def done(self) -> bool:
        """True once every rank (of the last attempt) has ended and everything is cleaned up."""
        return self._ended

    @property
    def view(self) -> LaunchListener:
        """What shows this launch in its cell: a ``WidgetView`` (its ``static`` form, its boxes), a
        ``TextView``, or a view that shows nothing (``display="none"``)."""
        return self._view

    def join(self, timeout: float | None = None) -> bool:
        """Wait until the launch has ended (at most ``timeout`` seconds) without raising or stopping
        it on an interrupt; True once it has ended. ``wait()`` is what a cell usually wants.

        Examples:
            >>> from notebook_launcher import launch
            >>> job = launch(lambda: None, num_processes=1, display="none")
            >>> job.join(60), job.status
            (True, 'succeeded')
        """
        return wait_event(self._done, timeout)

    def wait(self, timeout: float | None = None) -> Any:
        """Wait for the launch to end and return the first local rank's (rank 0's) return value.

        A kernel interrupt while waiting takes the stacks of the ranks still running (where each
        was), stops every rank, and raises ``KeyboardInterrupt`` saying so.

        Raises:
            Exception: the failing rank's exception (its own type, message prefixed with its rank).
            WorkerError: a rank died or exited without a result.
            LaunchStalled: ``stall_timeout`` ended the launch (``LaunchTimeout``: ``timeout`` did).
            LaunchError: the launch was stopped, or could not start.
            TimeoutError: ``timeout`` passed (the launch keeps running).
        """
        __tracebackhide__ = True  # IPython folds this frame: the cell shows the rank's frames
        in_cell = threading.get_ident() == self._made_on  # the cell that made it (notebook_launcher)
        self._waiting(+1)
        if in_cell:
            self._listener.on_event(CellWaits(True))
        try:
            finished = wait_event(self._done, timeout)
        except KeyboardInterrupt:
            self.stop()
            interrupted = True
        else:
            interrupted = False
        finally:
            self._waiting(-1)
            if in_cell:
                self._listener.on_event(CellWaits(False))  # shows what a view left for this cell
        if interrupted:
            message = f"launch {self.id} stopped: every rank has ended{where_they_were(self.last_stacks)}"
            raise shown_as(KeyboardInterrupt(message), line=f"KeyboardInterrupt: {message}") from None
        if not finished:
            raise TimeoutError(f"launch {self.id} still running after {timeout} s")
        exception = self._ending_exception()
        if exception is not None:
            raise exception
        return self._record.results[0]

    def _ending_exception(self) -> BaseException | None:
        """What ``wait()`` raises for the ended launch (with the rank's frames), or None."""
        failure = self._record.failure
        if failure is not None:
            if self._raised is None or self._raised[0] is not failure:
                function = getattr(self.plan.function, "__name__", "function")
                self._raised = (failure, also_child_failed(failure, self._record.failed_rank, function))
            return self._raised[1].with_traceback(self._record.failure_traceback)
        if self._record.status == "stopped":
            by = f" by {self._stopped_by}" if self._stopped_by else ""
            where = where_they_were(self.last_stacks)
            message = f"launch {self.id} was stopped{by} before every rank returned{where}"
            return shown_as(LaunchError(message), line=f"LaunchError: {message}")
        return None

    @property
    def future(self) -> concurrent.futures.Future:
        """The launch as a ``concurrent.futures.Future``: its result is rank 0's return value, its
        exception what ``wait()`` raises; ``add_done_callback``, ``result(timeout)`` and
        ``asyncio.wrap_future`` work on it (callbacks run on the launcher's thread). It cannot be
        cancelled: ``stop()`` ends a launch.

        Examples:
            >>> from notebook_launcher import launch
            >>> job = launch(lambda: 7, num_processes=1, display="none")
            >>> job.future.result(timeout=60)
            7
        """
        return self._future

    def _waiting(self, change: int) -> None:
        self._waiters += change
        if not self.done:
            self._observed.changed()

    def request_stop(self, by: str = "") -> None:
        """Ask every rank to end (after taking the stacks of those still running) and return at once;
        ``stop()`` also waits until they have. ``by`` names who asked, for the error ``wait()`` raises."""
        with self._attempt_lock:
            self._stopping = True
            self._stopped_by = self._stopped_by or by
            supervisor = self._supervisor
        self._stop_asked.set()
        supervisor.request_stop(with_stacks=True)

    @property
    def stopping(self) -> bool:
        """True once a stop was asked for (the ranks are being ended, or have been)."""
        return self._stopping

    def stop(self, timeout: float | None = None) -> bool:
        """End every rank (SIGTERM, then SIGKILL after the grace period) and wait until they are gone.

        The stacks of the ranks still running are taken first (``last_stacks``; a second at most).
        Returns True when everything has ended within ``timeout`` seconds (default: no limit). A kernel
        interrupt while it waits ends the ranks at once (SIGKILL, no grace period).
        """
        self.request_stop()
        try:
            return wait_event(self._done, timeout)
        except KeyboardInterrupt:  # a second interrupt while stopping: no grace period, SIGKILL now
            with self._attempt_lock:
                supervisor = self._supervisor
            supervisor.request_kill()
            return wait_event(self._done, timeout)

    def stacks(self, timeout: float = 5.0) -> Stacks | None:
        """Where every live rank is: the Python stack of each of its threads, without stopping it.

        Returns a ``Stacks`` (rank → threads and frames; ``print()`` it to read it). Ranks that do not
        answer within ``timeout`` seconds are listed as missing. After the launch, the stacks taken
        when it was stopped or stalled, if any.

        Examples:
            >>> import threading
            >>> from notebook_launcher import launch
            >>> def waits():
            ...     print("waiting", flush=True)
            ...     threading.Event().wait()
            >>> job = launch(waits, num_processes=1, display="none")
            >>> while "waiting" not in job.logs(0):  # inside the function (a loaded machine may be slow)
            ...     _ = job.join(0.05)
            >>> "in waits" in job.stacks().summary()
            True
            >>> job.stop()
            True
        """
        if self.done:
            return self._record.latest_stacks()
        deadline = time.monotonic() + timeout
        while any(self.rank_status(rank) == "starting" for rank in self.ranks) and time.monotonic() < deadline:
            self._done.wait(0.01)  # a rank still starting up cannot answer yet
        self._record.stacks_requested(None)
        self._supervisor.request_stacks()
        self._record.wait_for_stacks(max(0.0, deadline - time.monotonic()))
        return self._record.latest_stacks()

    @property
    def last_stacks(self) -> Stacks | None:
        """The stacks taken last (by ``stacks()``, a stop, a stall or a timeout), or None."""
        return self._record.latest_stacks()
