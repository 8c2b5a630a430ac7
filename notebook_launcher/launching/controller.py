"""What should happen in a running launch: the fault policy, apart from how ranks are reached.

The controller is told what happened (a rank's status, result, error, stacks or exit; a stop; the
time passing) and answers with commands (``Terminate``, ``Kill``, ``AskStacks``, ``TellOtherNodes``,
``ShowStatus``). It never touches a process, a descriptor or a thread: the supervisor carries the
commands out on a ``RankGroup`` (local processes today), so the rules below are tested with a
scripted list of events and a fake clock (tests/unit/test_controller.py):

* the first failure wins (an exception, a death, an exit without a result, a stall, a timeout,
  another node's failure); every other live rank is then ended — SIGTERM-like ``Terminate`` now,
  ``Kill`` once the grace period has passed; a rank that reported (its result or its own error) is
  spared the ``Terminate``: it is exiting anyway, and its exit must not be cut short;
* a rank's error that only says it lost a peer is held ``COLLATERAL_WAIT`` seconds: the peer's own
  failure is the cause, the held error becomes a note on it;
* before a stall, a timeout or a stop with stacks ends the ranks, their stacks are asked for
  (``STACKS_WAIT`` at most);
* once every rank has returned, the ranks get ``EXIT_AFTER_RESULT`` seconds to exit on their own;
* a returned value is unpickled by the supervisor's helper thread (unpickling runs the value's own
  code, which may block); one not unpickled within ``UNPICKLE_WAIT`` seconds is its rank's failure;
* with several nodes, the other nodes' health is looked at every ``monitor_interval`` seconds.

Examples:
    >>> from notebook_launcher.launching.record import LaunchRecord
    >>> class Clock:  # time that moves only when told
    ...     now = 0.0
    ...     def monotonic(self): return self.now
    ...     def wall(self): return self.now
    >>> clock = Clock()
    >>> control = Controller(LaunchRecord(2), grace_period=2.0, clock=clock)
    >>> control.started()
    []
    >>> [type(command).__name__ for command in control.exited([1], exitcode=-9, signalled=False)]
    ['ShowStatus', 'TellOtherNodes', 'Terminate']
    >>> clock.now += 2.0; control.tick()
    [Kill()]
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

from ..backends.plans import FaultPolicy
from ..errors import LaunchError, LaunchStalled, LaunchTimeout, WorkerError, add_note, describe_exit, lost_a_peer
from .commands import AskStacks, Clock, Command, Kill, ShowStatus, TellOtherNodes, Terminate
from .record import LaunchRecord
from .watchdog import Watchdog

__all__ = [
    "Controller",
    "Phase",
    "Command",
    "Terminate",
    "Kill",
    "AskStacks",
    "TellOtherNodes",
    "ShowStatus",
    "Clock",
    "COLLATERAL_WAIT",
    "EXIT_AFTER_RESULT",
    "STACKS_WAIT",
    "UNPICKLE_WAIT",
]

COLLATERAL_WAIT = 3.0  # seconds a "lost its peer" error waits for the peer's own failure to arrive
EXIT_AFTER_RESULT = 10.0  # seconds a rank that returned may take to exit before it is ended
STACKS_WAIT = 1.0  # seconds to wait for the stacks of ranks about to be ended
UNPICKLE_WAIT = 120.0  # seconds a returned value may take to be unpickled in the kernel


class Phase(enum.Enum):
    RENDEZVOUS = "rendezvous"
    STARTING = "starting"
    RUNNING = "running"
    ENDING = "ending"
    FINISHED = "finished"


class Controller:
    """The policy of one attempt of a launch; see the module docstring.

    Args:
        record: the launch's record; the controller writes results, failures, statuses and stacks.
        grace_period: seconds between ``Terminate`` and ``Kill``.
        clock: ``monotonic()`` and ``wall()``; a clock moved by hand in tests.
        faults: ``stall_timeout``, ``timeout`` and ``monitor_interval`` (the grace period is passed alone).
        num_nodes: with more than one, the other nodes are watched through ``failure_elsewhere``.
        failure_elsewhere: what another node reported, or None (asked on the health checks and
            when this node fails, to name a cause that came from elsewhere).
        launch_started: when the launch (not this attempt) started, for ``timeout``.
    """

    def __init__(
        self,
        record: LaunchRecord,
        grace_period: float,
        clock: Clock,
        faults: FaultPolicy | None = None,
        num_nodes: int = 1,
        failure_elsewhere: Callable[[], str | None] = lambda: None,
        launch_started: float | None = None,
    ) -> None:
        faults = faults or FaultPolicy()
        self._record = record
        self._grace = grace_period
        self._clock = clock
        self._monitor_interval = faults.monitor_interval
        self._num_nodes = num_nodes
        self._failure_elsewhere = failure_elsewhere
        self._watchdog = Watchdog(
            faults.stall_timeout, faults.timeout, clock.monotonic(), launch_started, faults.straggler_timeout,
            faults.stall_hint,
        )  # fmt: skip
        self.phase = Phase.STARTING
        self.kill_at: float | None = None
        self.stopped = False
        self._reported: set[int] = set()  # ranks that sent a result or an error
        self._unpickling: dict[int, float] = {}  # rank → when its value must be unpickled by
        self._exited: set[int] = set()
        self._ending_at: float | None = None  # after asking for stacks: when to end the ranks anyway
        self._pending_failure: BaseException | None = None
        # a rank's error that only says it lost a peer, held briefly: the peer's own failure is the cause
        self._collateral: tuple[int, BaseException, float, float] | None = None
        self._next_health_check = 0.0

    # -- what is asked of it --------------------------------------------------------------------

    @property
    def live_ranks(self) -> list[int]:
        return [rank for rank in self._record.ranks if rank not in self._exited]

    @property
    def unpickling(self) -> bool:
        """Whether a returned value is still awaited from the unpickler (a stop waits for none)."""
        return bool(self._unpickling) and not self.stopped

    def started(self) -> list[Command]:
        """Every rank has been started; a stop asked for while starting takes effect now."""
        self.phase = Phase.RUNNING
        return self._end_ranks() if self.stopped else []

    def end(self) -> list[Command]:
        """End every live rank (after a launcher fault, or when the supervisor shuts down)."""
        return self._end_ranks()

    def stop(self, with_stacks: bool = False) -> list[Command]:
        """A person stopped the launch (interrupt, ``stop()``, the Stop button)."""
        self._record.mark_stopped()
        self.stopped = True
        if self.phase in (Phase.STARTING, Phase.ENDING):
            return []
        return self._end_after_stacks(None) if with_stacks else self._end_ranks()

    def kill(self) -> list[Command]:
        """A second interrupt: end everything now, without the grace period."""
        self._record.mark_stopped()
        self.stopped = True
        return [*self._end_ranks(), *self._kill()]

    def ask_stacks(self) -> list[Command]:
        """Ask the running ranks where they are (a rank that returned has nothing to show; one still
        starting may not handle the request yet, so it is not asked)."""
        running = tuple(rank for rank in self.live_ranks if self._record.rank_status(rank) == "running")
        self._record.stacks_requested(list(running))
        return [AskStacks(running)] if running else []

    def deadline(self) -> float | None:
        """The next moment ``tick()`` has something to do (monotonic), or None."""
        deadlines = [
            self.kill_at,
            self._watchdog.deadline() if self.phase is Phase.RUNNING else None,
            self._ending_at,
            self._next_health_check if self._num_nodes > 1 and self.phase is Phase.RUNNING else None,
            self._collateral[3] if self._collateral else None,
            min(self._unpickling.values(), default=None),
        ]
        return min((d for d in deadlines if d is not None), default=None)

    # -- what happened --------------------------------------------------------------------------

    def activity(self) -> None:
        """A rank wrote output, logged a metric, changed status or sent anything else."""
        self._watchdog.activity(self._clock.monotonic())

    def result(self, rank: int, when: float) -> list[Command]:
        """``rank`` returned; its value is being unpickled (``unpickled`` or ``unreadable`` follows)."""
        self._reported.add(rank)
        now = self._clock.monotonic()
        self._watchdog.result(now)
        self._unpickling[rank] = now + UNPICKLE_WAIT
        self._record.set_rank_status(rank, "done")
        if len(self._reported) == len(self._record.ranks):
            self._kill_after(max(self._grace, EXIT_AFTER_RESULT))
        return [ShowStatus(rank, "done")]

    def unpickled(self, rank: int, value: Any) -> list[Command]:
        """``rank``'s return value, unpickled (ignored once its wait ran out)."""
        if self._unpickling.pop(rank, None) is not None:
            self._record.add_result(rank, value)
        return []

    def unreadable(self, rank: int, error: BaseException, when: float) -> list[Command]:
        """Unpickling ``rank``'s return value raised ``error``: that is the rank's failure."""
        if self._unpickling.pop(rank, None) is None:
            return []
        why = f"rank {rank}'s return value could not be unpickled in the kernel: {type(error).__name__}: {error}"
        return self._fail(rank, WorkerError(rank, why), when)

    def error(self, rank: int, exception: BaseException, when: float) -> list[Command]:
        """``rank`` raised ``exception`` (rebuilt in the kernel) at ``when``."""
        self._reported.add(rank)
        if lost_a_peer(exception):
            cause = self._record.failure
            if cause is not None:  # the peer's failure came first: this is its consequence, not a rival
                add_note(cause, f"rank {rank} failed after it: {type(exception).__name__}: {exception}")
                return []
            if self._collateral is None and self.phase is Phase.RUNNING:
                self._collateral = (rank, exception, when, self._clock.monotonic() + COLLATERAL_WAIT)
                return []
        return self._fail(rank, exception, when)

    def reject(self, rank: int, what: str) -> list[Command]:
        """``rank`` sent something the kernel cannot take (``what`` says what): that is its failure."""
        self._reported.add(rank)
        return self._fail(rank, WorkerError(rank, f"rank {rank} sent {what}"), self._clock.wall())

    def stacks(self, rank: int, report: Any) -> list[Command]:
        """``rank`` answered a request for its stacks."""
        self._record.add_stacks(rank, report)
        if self._ending_at is not None and self._record.stacks_complete():
            return self._finish_ending()
        return []

    def exited(self, ranks: list[int], exitcode: int | None, signalled: bool, lost: str | None = None) -> list[Command]:
        """The process (or actor) carrying ``ranks`` has ended; ``signalled``: the launcher ended it;
        ``lost``: what took it, when not the rank itself. Called after everything it sent before its
        end has been handled."""
        self._exited.update(ranks)
        commands: list[Command] = []
        for rank in ranks:
            if rank in self._reported:
                continue
            if signalled:
                self._record.set_rank_status(rank, "stopped")
                commands.append(ShowStatus(rank, "stopped"))
            else:
                failure = WorkerError(rank, describe_exit(rank, exitcode, lost), exitcode=exitcode)
                for note in self._record.exit_notes(rank):  # e.g. who sent a SIGTERM the launcher did not send
                    add_note(failure, note)
                commands += self._fail(rank, failure, self._clock.wall())
        return commands

    def fault(self, exception: BaseException) -> list[Command]:
        """The launcher itself failed (a refused rendezvous or start, a bug): nothing more runs."""
        if not isinstance(exception, LaunchError):
            fault = LaunchError(f"the launcher failed: {type(exception).__name__}: {exception}")
            fault.__cause__ = exception
            exception = fault
        self._record.add_failure(None, exception, self._clock.wall())
        return []

    def tick(self) -> list[Command]:
        """The time has passed ``deadline()`` (or anything else happened): what is due now."""
        now = self._clock.monotonic()
        commands: list[Command] = []
        if self._collateral is not None and now >= self._collateral[3]:
            commands += self.settle()
        if self._ending_at is not None and now >= self._ending_at:
            commands += self._finish_ending()
        for rank, by in list(self._unpickling.items()):
            if now >= by:
                del self._unpickling[rank]
                why = (
                    f"rank {rank}'s return value was still being unpickled in the kernel after {UNPICKLE_WAIT:g} s"
                    " (its __reduce__ or __setstate__ blocks?); the launch went on without it"
                )
                commands += self._fail(rank, WorkerError(rank, why), self._clock.wall())
        if self.kill_at is not None and now >= self.kill_at:
            commands += self._kill()
        if self.phase is Phase.RUNNING:
            commands += self._check_running(now)
        return commands

    def settle(self) -> list[Command]:
        """No other rank failed first: a held "lost its peer" error is the launch's failure after all."""
        if self._collateral is None:
            return []
        rank, exception, when, _ = self._collateral
        self._collateral = None
        return self._fail(rank, exception, when)

    def leaves_quietly(self) -> bool:
        """Whether this node should wait for the others at the end (it neither failed nor was stopped)."""
        return self._record.failure is None and not self.stopped

    # -- the rules ------------------------------------------------------------------------------

    def _check_running(self, now: float) -> list[Command]:
        unfinished = [rank for rank in self._record.ranks if rank not in self._reported]
        expired = self._watchdog.expired(now, unfinished)
        if expired is not None:
            kind, why = expired
            error_type = LaunchTimeout if kind == "timeout" else LaunchStalled
            return self._end_after_stacks(error_type(why, ranks=unfinished))
        if self._num_nodes > 1 and now >= self._next_health_check:
            self._next_health_check = now + self._monitor_interval
            elsewhere = self._failure_elsewhere()
            if elsewhere is not None:
                failure = LaunchError(f"another node failed ({elsewhere}); this node's ranks were ended")
                return self._fail(None, failure, self._clock.wall(), tell_others=False)
        self._update_waiting(unfinished, now)
        return []

    def _update_waiting(self, unfinished: list[int], now: float) -> None:
        """A live line for ranks that keep the others waiting (some returned, these did not)."""
        first = self._watchdog.first_result
        waiting = ""
        if first is not None and unfinished:
            names = ", ".join(str(rank) for rank in unfinished)
            plural = "s" if len(unfinished) > 1 else ""
            waiting = f"waiting for rank{plural} {names}: another rank returned {now - first:.0f} s ago"
        if waiting != self._record.waiting:
            self._record.waiting = waiting

    def _end_after_stacks(self, failure: BaseException | None) -> list[Command]:
        """Ask the live ranks where they are, then end them (and fail with ``failure``) once they all
        answered or ``STACKS_WAIT`` passed."""
        if self.phase is Phase.ENDING or self._ending_at is not None:
            return []
        self._pending_failure = failure
        if not self.live_ranks:
            return self._finish_ending()
        self._ending_at = self._clock.monotonic() + STACKS_WAIT
        return self.ask_stacks()

    def _finish_ending(self) -> list[Command]:
        self._ending_at = None
        failure, self._pending_failure = self._pending_failure, None
        if failure is None:
            return self._end_ranks()
        if isinstance(failure, (LaunchStalled, LaunchTimeout)):
            stacks = self._record.latest_stacks()
            failure.stacks = stacks
            if stacks:
                failure.args = (f"{failure.args[0]}\n{stacks.summary()}",)
        return self._fail(None, failure, self._clock.wall())

    def _fail(self, rank: int | None, exception: BaseException, when: float, tell_others: bool = True) -> list[Command]:
        if self._collateral is not None and self._collateral[0] != rank:
            held_rank, held, _, _ = self._collateral
            self._collateral = None
            add_note(exception, f"rank {held_rank} failed after it: {type(held).__name__}: {held}")
        elsewhere = self._failure_elsewhere() if tell_others and self._num_nodes > 1 else None
        if elsewhere is not None:  # e.g. a collective broken by it
            add_note(exception, f"another node failed first: {elsewhere}")
        self._record.add_failure(rank, exception, when, exception.__traceback__)
        commands: list[Command] = []
        if rank is not None:
            commands.append(ShowStatus(rank, "failed"))
        if tell_others:
            what = f"{type(exception).__name__}: {exception}"
            commands.append(TellOtherNodes(f"rank {rank} failed: {what}" if rank is not None else what))
        return commands + self._end_ranks()

    def _end_ranks(self) -> list[Command]:
        if self.phase is Phase.ENDING:
            return []
        self.phase = Phase.ENDING
        self._ending_at = None
        self._kill_after(self._grace)
        return [Terminate(tuple(sorted(self._reported)))]

    def _kill(self) -> list[Command]:
        self.kill_at = None
        return [Kill()]

    def _kill_after(self, seconds: float) -> None:
        deadline = self._clock.monotonic() + seconds
        self.kill_at = deadline if self.kill_at is None else min(self.kill_at, deadline)
