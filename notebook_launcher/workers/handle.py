"""The handle of running persistent workers: calls to their ranks, one at a time, and their end.

``Workers`` (made by ``start_workers`` in ``starting``) sends each call to the ranks over their
Unix-socket connections, waits for the replies that come back on the ranks' event channels after
their output, shows what the called ranks wrote in the calling cell (``router``, ``call_record``),
handles interrupts (one interrupts the call, a second stops the workers) and stops them.

Examples:
    >>> from notebook_launcher.workers import start_workers
    >>> workers = start_workers(num_processes=2, display="none")
    >>> workers.run(lambda x: x * 10, 4)
    [40, 40]
    >>> workers.stop()
    >>> workers.status
    'stopped'
"""

from __future__ import annotations

import itertools
import os
import pickle
import shutil
import signal
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

from ..errors import LaunchError
from ..launching.stacks import where_they_were
from ..tracebacks import shown_as
from ..wire import rebuild_exception
from .call_record import CallLaunch
from .interrupts import CountedInterrupts
from .router import Call, CallRouter, call_view

__all__ = ["Workers"]

STOP_TIMEOUT = 10.0  # seconds ranks get to end after being told to stop, before they are ended

_INTERRUPTING = "interrupting the call on every rank (interrupt again to stop the workers)"
_HINT_AFTER = 1.0  # seconds the ranks may take to stop on an interrupt before the cell says what to do


class _Hint:
    """Says ``_INTERRUPTING`` once the ranks have not stopped ``_HINT_AFTER`` seconds after an
    interrupt; an interrupt they obey at once leaves one line, the cell's KeyboardInterrupt."""

    def __init__(self) -> None:
        self._due: float | None = None

    def arm(self) -> None:
        self._due = time.monotonic() + _HINT_AFTER

    def wait(self, longest: float) -> float:
        return longest if self._due is None else max(0.0, min(longest, self._due - time.monotonic()))

    def say_when_due(self) -> None:
        if self._due is not None and time.monotonic() >= self._due:
            self._due = None
            print(_INTERRUPTING, file=sys.stderr)


class Workers:
    """Long-lived ranks that run calls; made by ``start_workers``.

    Every call goes to all ranks (or ``ranks=[...]``) and returns one value per called rank, in rank
    order. A rank's exception is raised in the cell as from a launch (``[rank N]`` message, the
    rank's frames) and the workers stay up for the next call; only a rank that dies ends them.
    """

    def __init__(self, launch, router: CallRouter, connections, pids, directory, display="auto") -> None:
        self.launch = launch
        self._router = router
        self._connections: dict[int, Connection] = connections
        self._pids: dict[int, int] = pids
        self._directory = directory
        self._display = display
        self._ids = itertools.count(1)
        self._lock = threading.Lock()  # one call at a time
        self._busy = False
        self._stopped = False
        router.on_end = self._cleanup

    # -- state ------------------------------------------------------------------------------------

    @property
    def ranks(self) -> list[int]:
        """The workers' global ranks."""
        return sorted(self._connections)

    @property
    def pids(self) -> dict[int, int]:
        """Each rank's process id."""
        return dict(self._pids)

    @property
    def status(self) -> str:
        """ "idle", "busy" (a call runs), "stopped" or "failed" (a rank died: the workers ended)."""
        if self.launch.done:
            return "stopped" if self._stopped or self.launch.status in ("succeeded", "stopped") else "failed"
        return "busy" if self._busy else "idle"

    def __repr__(self) -> str:
        return f"<Workers {self.launch.id}: {len(self._pids)} ranks, {self.launch.plan.start_method}, {self.status}>"

    # -- calls ------------------------------------------------------------------------------------

    def run(self, function, *args, ranks=None) -> list:
        """Run ``function(*args)`` on every rank (or ``ranks``); returns their return values.

        Examples:
            >>> workers.run(lambda: int(os.environ["RANK"]))   # doctest: +SKIP
            [0, 1]
        """
        from ..wire import by_value

        return self._call("run", by_value.dumps((function, args)), ranks)

    def exec(self, code: str, ranks=None, *, filename: str | None = None, first_line: int = 1, show=False) -> list:
        """Run source code in each rank's own namespace (kept between calls); returns each rank's
        value of the last line when it is an expression, else None.

        ``filename``/``first_line`` name the cell the code comes from, for tracebacks; ``show``
        returns the values as the text IPython would show for them.

        Examples:
            >>> workers.exec("x = 2\\nx * 21")   # doctest: +SKIP
            [42, 42]
        """
        name = filename or f"<workers exec {next(self._ids)}>"
        payload = {"source": code, "filename": name, "first_line": first_line, "as_text": show}
        return self._call("exec", payload, ranks)

    def pull(self, name: str, ranks=None) -> list:
        """The value of ``name`` in each rank's namespace (large tensors come through shared memory).

        Examples:
            >>> workers.pull("x")   # doctest: +SKIP
            [2, 2]
        """
        return self._call("pull", name, ranks)

    def push(self, ranks=None, **values) -> None:
        """Set names in each rank's namespace.

        Examples:
            >>> workers.push(lr=1e-3)   # doctest: +SKIP
        """
        from ..wire import by_value

        self._call("push", by_value.dumps(values), ranks)

    def stacks(self, timeout: float = 5.0):
        """Where every rank is now (``Launch.stacks``): for a call stuck in a collective."""
        return self.launch.stacks(timeout)

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """End the workers: each rank is told to stop, and ended if it has not within ``timeout``."""
        self._stopped = True
        for connection in self._connections.values():
            try:
                connection.send((0, "stop", None))
            except OSError:  # that rank is gone already
                pass
        try:
            self.launch.wait(timeout)
        except TimeoutError:
            self.launch.stop()
        except BaseException:  # a rank that failed on its way out: it is stopped all the same
            pass
        self._cleanup()

    def _cleanup(self) -> None:
        for connection in self._connections.values():
            try:
                connection.close()
            except OSError:
                pass
        shutil.rmtree(self._directory, ignore_errors=True)

    # -- one call ---------------------------------------------------------------------------------

    def _call(self, kind: str, payload: Any, ranks, display: str | None = None) -> list:
        ranks = self._ranks_of(ranks)
        if not self._lock.acquire(blocking=False):
            raise RuntimeError("the workers are running another call (from another thread)")
        try:
            self._check_running()
            call_id = next(self._ids)
            view = call_view(display or self._display, self.launch.plan.log_line_prefix)
            call = Call(call_id, ranks, view, CallLaunch(self.launch, call_id, ranks))
            self._busy = True
            self._router.begin(call)
            view.cell_waits(True)
            # an interrupt while the call is being sent is counted (not raised) and handled by _wait
            sigints = CountedInterrupts(armed=False)
            try:
                with sigints:
                    for rank in ranks:
                        try:
                            self._connections[rank].send((call.id, kind, payload))
                        except OSError:  # the rank died; the launch's failure says how
                            break
                    self._wait(call, sigints)
                values, failure = self._outcome(call)
            except BaseException as interrupted:  # an interrupt, or the workers ended: the call's view says so
                values, failure = {}, None if sigints.count else (call.ranks[0], interrupted)
                raise
            finally:
                call.handle.finish(values, failure, interrupted=bool(sigints.count))
                self._router.end(call)
                view.cell_waits(False)  # shows the finished form a quick call left for this cell
                self._busy = False
            if failure is not None:  # shown with the rank's frames: the cell's lines, nothing of ours
                raise shown_as(failure[1], failure[1].__traceback__)
            return [values[rank] for rank in call.ranks]
        finally:
            self._lock.release()

    def _ranks_of(self, ranks) -> list[int]:
        if ranks is None:
            return self.ranks
        ranks = [ranks] if isinstance(ranks, int) else list(ranks)
        unknown = [rank for rank in ranks if rank not in self._connections]
        if unknown or not ranks:
            raise ValueError(f"ranks must be some of {self.ranks}, got {ranks}")
        return sorted(set(ranks))

    def _check_running(self) -> None:
        if self.launch.done:
            raise LaunchError(f"the workers have {self.status}; start new ones with start_workers() or %dist start")

    def _wait(self, call: Call, sigints: CountedInterrupts) -> None:
        hint = _Hint()
        if sigints.count:  # the interrupt came while the call was being sent: it is the first one
            self._interrupt(call.ranks)
            hint.arm()
        sigints.rearm()
        while True:
            try:
                with call.answered:
                    while not call.complete and not self.launch.done and sigints.count < 2:
                        hint.say_when_due()
                        call.answered.wait(hint.wait(1.0))  # woken by every reply and by the launch's end
                if sigints.count < 2:
                    break
            except KeyboardInterrupt:
                if sigints.count < 2:
                    self._interrupt(call.ranks)
                    hint.arm()
                    sigints.rearm()
                    continue
            self._stop_interrupted()
        if not call.complete:
            self._raise_ended()
        if sigints.count:
            message = (
                "the cell was interrupted on every rank; the workers are kept, with their state"
                " (%dist stop, or interrupting twice, ends them)"
            )
            raise shown_as(KeyboardInterrupt(message), line=f"KeyboardInterrupt: {message}")

    def _stop_interrupted(self):
        self._stopped = True
        self.launch.stop()
        message = f"interrupted twice: the workers were stopped{where_they_were(self.launch.last_stacks)}"
        raise shown_as(KeyboardInterrupt(message), line=f"KeyboardInterrupt: {message}") from None

    def _interrupt(self, ranks: list[int]) -> None:
        for rank in ranks:
            try:
                os.kill(self._pids[rank], signal.SIGINT)
            except ProcessLookupError:
                pass

    def _raise_ended(self):
        try:
            self.launch.wait()
        except BaseException as failure:
            if hasattr(failure, "add_note"):
                failure.add_note("the workers have ended: start new ones with start_workers() or %dist start")
            raise
        raise LaunchError("the workers ended during the call")

    def _outcome(self, call: Call) -> tuple[dict[int, Any], tuple[int, BaseException] | None]:
        """Each rank's value, and the first failing rank's rebuilt exception (others noted on it)."""
        failures = [(rank, call.replies[rank]["error"]) for rank in call.ranks if "error" in call.replies[rank]]
        values = {
            rank: pickle.loads(call.replies[rank]["value"]) for rank in call.ranks if "value" in call.replies[rank]
        }
        if not failures:
            return values, None
        rank, report = failures[0]
        error = rebuild_exception(rank, report)
        if len(failures) > 1 and hasattr(error, "add_note"):
            others = ", ".join(f"rank {r}: {report['type']}" for r, report in failures[1:])
            error.add_note(f"the call failed on other ranks too ({others}); the workers are still running")
        return values, (rank, error)
