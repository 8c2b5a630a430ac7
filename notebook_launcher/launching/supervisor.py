"""The supervisor: one thread per attempt of a launch that starts the ranks, reads them, and ends them.

It goes through five phases:

* RENDEZVOUS — the nodes meet and the kernel hosts (or joins) the ranks' store (``rendezvous``);
* STARTING — the starter starts one worker process per group of ranks;
* RUNNING — one loop waits on every worker's pipes and exit descriptor (and a wake-up pipe for
  ``stop()`` and ``stacks()``); output and events are read without blocking and handed, through a
  dispatch table, to the record and the listener (the launch's views); the watchdog
  (``stall_timeout``, ``timeout``) and the other nodes' health are checked on the way;
* ENDING — the first failure (an exception, a death, an exit without a result, a stall, a timeout,
  another node's failure) or a stop request ends the attempt: the stacks of the ranks still
  running are asked for first (a second at most) when a person or the watchdog will want to know
  where they were; then every rank still alive, and every process it started, gets SIGTERM, then
  SIGKILL after the grace period (the ``Reaper``) — a rank stuck in a collective cannot hold the cell;
* FINISHED — every worker has ended; its pipes are drained (what it wrote before dying is kept),
  every descriptor is closed, every process reaped and the store closed. Nothing outlives it.

Ranks are started from this thread, not the caller's: Linux's parent-death signal (set in each
rank) fires when the *thread* that started the rank ends, and supervisor threads never end (they
are reused, see ``threads``). It is also the only safe place to fork from: a kernel whose main
thread ran parallel torch code holds an OpenMP thread team there, and a child forked from that
thread hangs in its first parallel region (measured: forking from the main thread saved ~3 ms per
launch and hung the next launch after a cell had multiplied two large tensors). The loop runs in a
copy of the caller's context so that output reaches the launching cell. The supervisor knows
nothing of the ``Launch`` handle or of views: it reports to a ``RankEvents`` listener and calls
``on_done`` once everything is cleaned up.
"""

from __future__ import annotations

import contextvars
import enum
import os
import pickle
import sys
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import wait
from typing import Any, Protocol

from ..errors import LaunchError, LaunchStalled, LaunchTimeout, WorkerError, describe_exit, lost_a_peer
from ..rank.bootstrap import RankSpec
from ..starters.base import Starter
from ..starters.guardian import forget_group, watch_group
from ..starters.pipes import Worker, close_pipes, make_pipes
from ..starters.reaper import Reaper, end_group
from ..wire import (
    DISPLAY,
    ERROR,
    METRIC,
    OUTPUT,
    REPLY,
    RESULT,
    STACKS,
    STACKS_SIGNAL,
    STATUS,
    rebuild_exception,
)
from ..wire.shapes import check_payload, event_parts
from ..wire.shared_tensors import new_prefix, remove_leftovers, sweep_dead_kernels
from .plan import LaunchPlan
from .record import LaunchRecord
from .rendezvous import Rendezvous
from .threads import run_in_thread
from .watchdog import Watchdog

__all__ = ["Supervisor", "RankEvents", "Phase", "STACKS_WAIT"]

_START_LOCK = threading.Lock()  # a fork must not copy another launch's half-made pipes
COLLATERAL_WAIT = 3.0  # seconds a "lost its peer" error waits for the peer's own failure to arrive
_EXIT_AFTER_RESULT = 10.0  # seconds a rank that returned may take to exit before it is ended
STACKS_WAIT = 1.0  # seconds to wait for the stacks of ranks about to be ended
_LONGEST_WAIT = 3600.0  # one wait of the loop, at most (poll() takes no longer timeouts)


def _fresh_start_lock() -> None:
    """A process forked while a launch held the start lock (a launch from inside a rank) must not
    inherit it taken: it would wait for it for ever."""
    global _START_LOCK
    _START_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_start_lock)


class Phase(enum.Enum):
    RENDEZVOUS = "rendezvous"
    STARTING = "starting"
    RUNNING = "running"
    ENDING = "ending"
    FINISHED = "finished"


class RankEvents(Protocol):
    """What the supervisor reports, from its thread (the launch's views implement it)."""

    def on_status(self, rank: int, status: str) -> None: ...

    def on_output(self, rank: int, stream: str, text: str) -> None: ...  # complete lines, one or many

    def on_live(self, rank: int, stream: str, text: str) -> None: ...

    def on_display(self, rank: int, index: int, replaced: bool) -> None: ...

    def on_metric(self, rank: int, metric: dict) -> None: ...

    def flush(self) -> float | None: ...


class Supervisor:
    """Runs one attempt of a launch on its own thread; see the module docstring."""

    def __init__(
        self,
        plan: LaunchPlan,
        starter: Starter,
        record: LaunchRecord,
        listener: RankEvents,
        on_done: Callable[[], None],
        attempt: int = 0,
        launch_started: float | None = None,
    ) -> None:
        self._plan = plan
        self._starter = starter
        self._record = record
        self._listener = listener
        self._on_done = on_done
        self.attempt = attempt
        self.phase = Phase.RENDEZVOUS
        self._workers: list[Worker] = []
        self._reported: set[int] = set()  # ranks that sent a result or an error
        self._watch: dict[int, tuple[Worker | None, str]] = {}
        self._reaper = Reaper(plan.grace_period)
        self._watchdog = Watchdog(plan.faults.stall_timeout, plan.faults.timeout, time.monotonic(), launch_started)
        self._meeting = Rendezvous(
            plan.master_addr,
            plan.rendezvous.port,
            plan.node_rank,
            plan.num_nodes,
            plan.rendezvous.timeout,
            plan.rendezvous.backend,
            plan.rendezvous.endpoint,
            plan.run_id,
            plan.rendezvous.secret,
            attempt,
        )
        self.master_port: int | None = None
        self._tensor_prefix = new_prefix()
        _sweep_once()
        self._stop_requested = False
        self._stop_with_stacks = False
        self._ending_at: float | None = None  # after asking for stacks: when to end the ranks anyway
        self._pending_failure: BaseException | None = None
        # a rank's error that only says it lost a peer, held briefly: the peer's own failure is the cause
        self._collateral: tuple[int, BaseException, float, float] | None = None
        self._next_health_check = 0.0
        self._wake_r, self._wake_w = os.pipe()
        self._done = threading.Event()
        self._events: dict[str, Callable[[int, Any, float], None]] = {
            STATUS: self._on_status,
            OUTPUT: self._on_output,
            METRIC: self._on_metric,
            DISPLAY: self._on_display,
            RESULT: self._on_result,
            ERROR: self._on_error,
            STACKS: self._on_stacks,
            REPLY: self._on_reply,
        }

    def start(self) -> None:
        context = contextvars.copy_context()
        run_in_thread(lambda: context.run(self._run))

    def request_stop(self, with_stacks: bool = False) -> None:
        """Ask the loop to end every rank (after taking their stacks, with ``with_stacks``); returns at once."""
        if self._done.is_set():
            return
        self._stop_with_stacks = self._stop_with_stacks or with_stacks
        self._stop_requested = True
        self._wake(b"x")

    def request_kill(self) -> None:
        """End every rank now with SIGKILL, without waiting out the grace period; returns at once."""
        if not self._done.is_set():
            self._stop_requested = True
            self._wake(b"k")

    def request_stacks(self) -> None:
        """Ask every live rank for its stacks; they arrive in the record (``LaunchRecord.stacks``)."""
        self._wake(b"s")

    def _wake(self, byte: bytes) -> None:
        try:
            os.write(self._wake_w, byte)
        except OSError:  # the loop already closed the pipe: it is finishing anyway
            pass

    def join(self, timeout: float | None = None) -> bool:
        """Wait until the attempt has ended and everything is cleaned up; False on timeout."""
        return self._done.wait(timeout)

    @property
    def live_ranks(self) -> list[int]:
        return [rank for worker in self._workers if not worker.exited for rank in worker.ranks]

    # -- the thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._meet()
            self._start_workers()
            self._meeting.serve()
            self._loop()
            self._release_collateral()
        except LaunchError as refused:  # the rendezvous or a start refused: nothing (more) runs
            self._record.add_failure(None, refused, time.time())
        except BaseException as exc:  # a launcher fault must still end the ranks and reach the user
            fault = LaunchError(f"the launcher failed: {type(exc).__name__}: {exc}")
            fault.__cause__ = exc
            self._record.add_failure(None, fault, time.time())
        finally:
            self._shutdown()

    def _show_waiting(self, text: str) -> None:
        self._record.waiting = text
        self._notify("flush")

    def _meet(self) -> None:
        self.master_port = self._meeting.open(lambda: self._stop_requested, self._show_waiting)
        self._record.waiting = ""
        self.phase = Phase.STARTING

    def _start_workers(self) -> None:
        plan = self._plan
        node_rank = self._meeting.node_rank
        self._watch[self._wake_r] = (None, "wake")
        for group in self._starter.groups(plan):
            if self._stop_requested:
                break
            specs = [
                RankSpec(
                    plan.global_rank(local, node_rank),
                    local,
                    plan.environment(local, self.master_port, self.attempt, node_rank),
                    os.getpid(),
                    plan.threads,
                    self._tensor_prefix,
                )
                for local in group
            ]
            with _START_LOCK:
                ours, theirs = make_pipes()
                try:
                    process = self._starter.start(plan, specs, theirs)
                except BaseException:
                    close_pipes(ours)
                    raise
                finally:
                    close_pipes(theirs)
            watch_group(process.pid)
            worker = Worker([spec.rank for spec in specs], process, ours)
            self._workers.append(worker)
            for kind, fd in worker.pipes.items():
                self._watch[fd] = (worker, kind)
            self._watch[process.sentinel] = (worker, "exit")
        self.phase = Phase.RUNNING
        if self._stop_requested:
            self._record.mark_stopped()
            self._end_ranks()

    def _loop(self) -> None:
        refresh = None
        while any(not worker.exited for worker in self._workers):
            deadlines = [
                d
                for d in (
                    self._reaper.kill_at,
                    refresh,
                    self._watchdog.deadline(),
                    self._ending_at,
                    self._health_deadline(),
                    self._collateral[3] if self._collateral else None,
                )
                if d is not None
            ]
            timeout = min(_LONGEST_WAIT, max(0.0, min(deadlines) - time.monotonic())) if deadlines else None
            for fd in wait(list(self._watch), timeout):
                if fd in self._watch:
                    self._handle(fd, *self._watch[fd])
            self._check_time()
            if self._reaper.due():
                self._kill_remaining()
            delay = self._notify("flush")
            refresh = None if delay is None else time.monotonic() + delay

    def _handle(self, fd: int, worker: Worker | None, kind: str) -> None:
        if worker is None:  # the wake-up pipe: stop() or stacks() was called
            for byte in os.read(fd, 64):
                if byte == ord("s"):
                    self._ask_for_stacks()
                elif byte == ord("k"):
                    self._record.mark_stopped()
                    self._end_ranks()
                    self._kill_remaining()
                else:
                    self._on_stop_request()
        elif kind == "exit":
            self._on_exit(worker)
        else:
            worker.read(kind, drain=False, sink=self)
            if kind not in worker.pipes:  # the worker closed it (end of file)
                self._watch.pop(fd, None)

    def _on_stop_request(self) -> None:
        if self.phase is Phase.ENDING:
            return
        self._record.mark_stopped()
        if self._stop_with_stacks:
            self._end_after_stacks(None)
        else:
            self._end_ranks()

    # -- time: the watchdog, the stacks wait, the other nodes -------------------------------------

    def _check_time(self) -> None:
        now = time.monotonic()
        if self._collateral is not None and now >= self._collateral[3]:
            self._release_collateral()
        if self._ending_at is not None and now >= self._ending_at:
            self._finish_ending()
        if self.phase is not Phase.RUNNING:
            return
        unfinished = [rank for rank in self._record.ranks if rank not in self._reported]
        expired = self._watchdog.expired(now, unfinished)
        if expired is not None:
            kind, why = expired
            error_type = LaunchTimeout if kind == "timeout" else LaunchStalled
            self._end_after_stacks(error_type(why, ranks=unfinished))
            return
        if self._plan.num_nodes > 1 and now >= self._next_health_check:
            self._next_health_check = now + self._plan.faults.monitor_interval
            elsewhere = self._meeting.failure_elsewhere()
            if elsewhere is not None:
                self._fail(
                    None,
                    LaunchError(f"another node failed ({elsewhere}); this node's ranks were ended"),
                    time.time(),
                    tell_others=False,
                )
        self._update_waiting(unfinished)

    def _health_deadline(self) -> float | None:
        return self._next_health_check if self._plan.num_nodes > 1 and self.phase is Phase.RUNNING else None

    def _update_waiting(self, unfinished: list[int]) -> None:
        """A live line for ranks that keep the others waiting (some returned, these did not)."""
        first = self._watchdog.first_result
        if first is None or not unfinished:
            waiting = ""
        else:
            names = ", ".join(str(rank) for rank in unfinished)
            waiting = (
                f"waiting for rank{'s' if len(unfinished) > 1 else ''} {names}: another rank returned"
                f" {time.monotonic() - first:.0f} s ago"
            )
        if waiting != self._record.waiting:
            self._record.waiting = waiting

    # -- stacks -----------------------------------------------------------------------------------

    def _ask_for_stacks(self) -> None:
        """Signal the workers whose ranks run (a rank that returned has nothing to show; one still
        starting up has not blocked the signal yet, and its default action would end it)."""
        running = [
            worker
            for worker in self._workers
            if not worker.exited and any(self._record.rank_status(rank) == "running" for rank in worker.ranks)
        ]
        self._record.stacks_requested(
            [rank for worker in running for rank in worker.ranks if self._record.rank_status(rank) == "running"]
        )
        for worker in running:
            try:
                os.kill(worker.process.pid, STACKS_SIGNAL)
            except ProcessLookupError:
                pass

    def _end_after_stacks(self, failure: BaseException | None) -> None:
        """Ask the live ranks where they are, then end them (and fail with ``failure``) once they all
        answered or ``STACKS_WAIT`` passed."""
        if self.phase is Phase.ENDING or self._ending_at is not None:
            return
        self._pending_failure = failure
        if not self.live_ranks:
            self._finish_ending()
            return
        self._ask_for_stacks()
        self._ending_at = time.monotonic() + STACKS_WAIT

    def _finish_ending(self) -> None:
        self._ending_at = None
        stacks = self._record.latest_stacks()
        failure, self._pending_failure = self._pending_failure, None
        if failure is not None:
            if isinstance(failure, (LaunchStalled, LaunchTimeout)):
                failure.stacks = stacks
                if stacks:
                    failure.args = (f"{failure.args[0]}\n{stacks.summary()}",)
            self._fail(None, failure, time.time())
        else:
            self._end_ranks()

    def _on_stacks(self, rank: int, report: Any, when: float) -> None:
        self._record.add_stacks(rank, report)
        if self._ending_at is not None and self._record.stacks_complete():
            self._finish_ending()

    # -- what workers send (ReadSink) -----------------------------------------------------------

    def on_event(self, worker: Worker, event: Any) -> None:
        """One event from a worker. Whatever it holds, the supervisor goes on: an event it cannot
        read or handle is that rank's failure (a ``WorkerError`` saying what it sent)."""
        parts = event_parts(event, worker.ranks)
        if isinstance(parts, str):
            self._reject(worker.first_rank, parts)
            return
        kind, payload, when, rank = parts
        try:
            self._dispatch(worker, kind, payload, when, rank)
        except Exception as err:  # a payload of the wrong shape (a display without an id, ...)
            self._reject(rank, f"a {kind!r} event the kernel could not handle: {type(err).__name__}: {err}")

    def _reject(self, rank: int, what: str) -> None:
        self._reported.add(rank)
        self._fail(rank, WorkerError(rank, f"rank {rank} sent {what}"), time.time())

    def _dispatch(self, worker: Worker, kind: str, payload: Any, when: float, rank: int) -> None:
        check_payload(kind, payload)
        self._watchdog.activity(time.monotonic())
        if kind == REPLY:  # the rank flushed its output before replying: show all of it first
            for stream in ("stdout", "stderr"):
                fd = worker.pipes.get(stream)
                if fd is not None:
                    worker.read(stream, drain=True, sink=self)
                    if stream not in worker.pipes:  # the rank closed it
                        self._watch.pop(fd, None)
        self._events[kind](rank, payload, when)

    def on_text(self, rank: int, stream: str, text: str) -> None:
        self._watchdog.activity(time.monotonic())
        self._record.add_output(rank, stream, text)
        self._notify("on_output", rank, stream, text)

    def on_live(self, rank: int, stream: str, text: str) -> None:
        self._notify("on_live", rank, stream, text)

    def _on_status(self, rank: int, status: Any, when: float) -> None:
        self._record.set_rank_status(rank, status)
        self._notify("on_status", rank, status)

    def _on_output(self, rank: int, payload: Any, when: float) -> None:
        stream, text = payload
        self.on_text(rank, stream, text)

    def _on_metric(self, rank: int, metric: Any, when: float) -> None:
        self._record.add_metric(rank, metric, when)
        self._notify("on_metric", rank, metric)

    def _on_display(self, rank: int, payload: Any, when: float) -> None:
        index, replaced = self._record.add_display(rank, payload["data"], payload["display_id"], payload["update"])
        self._notify("on_display", rank, index, replaced)

    def _on_result(self, rank: int, payload: Any, when: float) -> None:
        self._reported.add(rank)
        self._watchdog.result(time.monotonic())
        try:
            value = pickle.loads(payload)
        except BaseException as err:  # SystemExit from a __reduce__ too: this thread must go on
            self._fail(
                rank,
                WorkerError(
                    rank,
                    f"rank {rank}'s return value could not be unpickled in the kernel: {type(err).__name__}: {err}",
                ),
                when,
            )
            return
        self._record.add_result(rank, value)
        self._notify("on_status", rank, "done")
        if len(self._reported) == self._plan.num_processes:
            self._reaper.kill_after(max(self._plan.grace_period, _EXIT_AFTER_RESULT))

    def _on_reply(self, rank: int, payload: Any, when: float) -> None:
        self._notify("on_reply", rank, payload)

    def _on_error(self, rank: int, report: Any, when: float) -> None:
        exception = rebuild_exception(rank, report)
        self._reported.add(rank)
        if lost_a_peer(exception):
            cause = self._record.failure
            if cause is not None:  # the peer's failure came first: this is its consequence, not a rival
                if hasattr(cause, "add_note"):
                    cause.add_note(f"rank {rank} failed after it: {type(exception).__name__}: {exception}")
                return
            if self._collateral is None and self.phase is Phase.RUNNING:
                self._collateral = (rank, exception, when, time.monotonic() + COLLATERAL_WAIT)
                return
        self._fail(rank, exception, when)

    def _release_collateral(self) -> None:
        """No other rank failed first: the held error is the launch's failure after all."""
        if self._collateral is not None:
            rank, exception, when, _ = self._collateral
            self._collateral = None
            self._fail(rank, exception, when)

    # -- endings --------------------------------------------------------------------------------

    def _on_exit(self, worker: Worker) -> None:
        _end_what_it_left(worker)
        worker.exitcode = worker.process.wait()
        self._watch.pop(worker.process.sentinel, None)
        for fd in worker.pipes.values():
            self._watch.pop(fd, None)
        worker.drain_and_close(self)
        for rank in worker.ranks:
            if rank in self._reported:
                continue
            if worker.signalled:
                self._record.set_rank_status(rank, "stopped")
                self._notify("on_status", rank, "stopped")
            else:
                message = describe_exit(rank, worker.exitcode)
                self._fail(rank, WorkerError(rank, message, exitcode=worker.exitcode), time.time())

    def _fail(self, rank: int | None, exception: BaseException, when: float, tell_others: bool = True) -> None:
        if self._collateral is not None and self._collateral[0] != rank:
            held_rank, held, _, _ = self._collateral
            self._collateral = None
            if hasattr(exception, "add_note"):
                exception.add_note(f"rank {held_rank} failed after it: {type(held).__name__}: {held}")
        elsewhere = self._meeting.failure_elsewhere() if tell_others else None
        if elsewhere is not None and hasattr(exception, "add_note"):  # e.g. a collective broken by it
            exception.add_note(f"another node failed first: {elsewhere}")
        self._record.add_failure(rank, exception, when, exception.__traceback__)
        if rank is not None:
            self._notify("on_status", rank, "failed")
        if tell_others:
            self._meeting.report_failure(
                f"rank {rank} failed: {type(exception).__name__}: {exception}"
                if rank is not None
                else f"{type(exception).__name__}: {exception}"
            )
        self._end_ranks()

    def _live(self) -> list[Worker]:
        return [worker for worker in self._workers if not worker.exited]

    def _end_ranks(self) -> None:
        """SIGTERM every live worker and its descendants now; SIGKILL what is left after the grace."""
        if self.phase is Phase.ENDING:
            return
        self.phase = Phase.ENDING
        self._ending_at = None
        live = self._live()
        for worker in live:
            worker.signalled = True
        self._reaper.terminate(worker.process.pid for worker in live)

    def _kill_remaining(self) -> None:
        live = self._live()
        for worker in live:
            worker.signalled = True
        self._reaper.kill(worker.process.pid for worker in live)

    def _shutdown(self) -> None:
        try:
            if self._live():
                self._end_ranks()
                self._wait_for_exits()
            self._reaper.end_stragglers()
            for worker in self._workers:
                _end_what_it_left(worker)
                forget_group(worker.process.pid)
                worker.drain_and_close(self)
                worker.process.release()
        finally:
            if self._record.failure is None and not self._stop_requested:
                self._meeting.leave(lambda: self._stop_requested, self._show_waiting)
            self._meeting.close()
            remove_leftovers(self._tensor_prefix)
            os.close(self._wake_r)
            os.close(self._wake_w)
            self._starter.cleanup()
            self._record.waiting = ""
            self.phase = Phase.FINISHED
            self._notify("flush")
            try:
                self._on_done()
            finally:
                self._done.set()

    def _wait_for_exits(self) -> None:
        """After a launcher fault: wait for the signalled workers (bounded), then kill what is left."""
        for worker in self._live():
            remaining = max(0.0, (self._reaper.kill_at or time.monotonic()) - time.monotonic())
            code = worker.process.wait(remaining)
            if code is None:
                self._kill_remaining()
                code = worker.process.wait()
            worker.exitcode = code

    def _notify(self, method: str, *args: Any) -> Any:
        try:
            return getattr(self._listener, method)(*args)
        except Exception:  # a broken view must not stop the supervision of the ranks
            traceback.print_exc(file=sys.__stderr__)
            return None


def _end_what_it_left(worker: Worker) -> None:
    """A rank has exited (perhaps killed, before it could end its own processes): what is left of its
    process group ends now. Called before the rank is reaped, so its pid cannot name another group."""
    end_group(worker.process.pid)


_swept = False


def _sweep_once() -> None:
    """On this kernel's first launch, remove the shared tensors of kernels that died holding some."""
    global _swept
    if not _swept:
        _swept = True
        sweep_dead_kernels()
