"""The supervisor: one thread per attempt of a launch that connects the ranks to the policy.

It goes through five phases:

* RENDEZVOUS — the nodes meet and the kernel hosts (or joins) the ranks' store (``rendezvous``;
  the starter's ``Meeting``: on a cluster, rank 0's node hosts it);
* STARTING — the starter's ``RankGroup`` starts the ranks (local processes: ``backends.local.rank_group``);
* RUNNING — one loop waits on the group's waitables (and a wake-up pipe for ``stop()`` and
  ``stacks()``, and the meeting's: one node's store starts when the first rank connects); the
  group reads what is ready into this object (a ``RankSink``), which checks each event, hands
  data to the record and the listener (the launch's views), and tells the ``Controller`` what
  happened; the controller's commands (terminate, kill, ask for stacks, tell
  the other nodes) are carried out on the group;
* ENDING — the controller decided the attempt ends (a failure, a stall, a timeout, a stop): the
  group ends the ranks, SIGTERM then SIGKILL after the grace period;
* FINISHED — every rank has ended; the group delivered what they wrote before dying, released
  every descriptor and process, and the store is closed. Nothing outlives it.

What should happen lives in ``controller.py`` (pure, tested with a fake clock); how ranks are reached
lives in the group. Ranks are started from this thread, not the caller's: Linux's parent-death
signal (set in each rank) fires when the *thread* that started the rank ends, and supervisor
threads never end (they are reused, see ``threads``). It is also the only safe place to fork from:
a kernel whose main thread ran parallel torch code holds an OpenMP thread team there, and a child
forked from that thread hangs in its first parallel region (measured: forking from the main thread
saved ~3 ms per launch and hung the next launch after a cell had multiplied two large tensors; the
milliseconds were the cell thread's locals, freed in each rank, which ``backends.local.caller_state`` now
keeps). The loop runs in a copy of the caller's context so that output reaches the launching cell. The
supervisor knows nothing of the ``Launch`` handle or of views: it reports to a ``LaunchListener``
(``listener.py``) and calls ``on_done`` once everything is cleaned up.
"""

from __future__ import annotations

import contextvars
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ..backends.base import RankGroup, Starter
from ..backends.plans import LaunchPlan
from ..interrupt_routing import history_thread_born_deaf
from ..telemetry import AttemptMeasures
from ..wire import rebuild_exception
from ..wire.events import Display, Failure, Malformed, Metric, Output, Reply, Result, Stacks, Status, decode_event
from ..wire.readiness import wait_readable
from ..wire.spec import RankSeat
from .controller import STACKS_WAIT, AskStacks, Command, Controller, Kill, Phase, ShowStatus, TellOtherNodes, Terminate
from .listener import LaunchEvent, LaunchListener, LiveLine, Shown
from .record import LaunchRecord
from .threads import run_in_thread
from .unpickler import Unpickler

__all__ = ["Supervisor", "Phase", "STACKS_WAIT"]

_T = TypeVar("_T")
_LONGEST_WAIT = 3600.0  # one wait of the loop, at most (poll() takes no longer timeouts)


class _SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()


class Supervisor:
    """Runs one attempt of a launch on its own thread; see the module docstring."""

    def __init__(
        self,
        plan: LaunchPlan,
        starter: Starter,
        record: LaunchRecord,
        listener: LaunchListener,
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
        self._meeting = starter.meeting(plan, attempt)
        self._control = Controller(
            record,
            plan.grace_period,
            _SystemClock(),
            plan.faults,
            plan.num_nodes,
            self._meeting.failure_elsewhere,
            launch_started,
        )
        self._measures = AttemptMeasures(record)
        self._group: RankGroup | None = None
        self._rendezvous_done = False
        self._finished = False
        self.master_port: int | None = None
        self._stop_requested = False
        self._wake_r, self._wake_w = os.pipe()
        self._unpickler = Unpickler(wake=lambda: self._wake(b"u"))
        self._done = threading.Event()
        self._handlers: dict[type, Callable[[Any], None]] = {
            Status: self._on_status,
            Output: self._on_output,
            Metric: self._on_metric,
            Display: self._on_display,
            Result: self._on_result,
            Failure: self._on_failure,
            Stacks: self._on_stacks,
            Reply: self._on_reply,
        }

    @property
    def phase(self) -> Phase:
        if self._finished:
            return Phase.FINISHED
        return self._control.phase if self._rendezvous_done else Phase.RENDEZVOUS

    def start(self) -> None:
        # The ranks are forked from this thread, never from the cell's: a rank forked from a thread
        # that ran OpenMP regions (parallel torch ops in the cell) inherits its pool without the
        # pool's threads, and hangs in its first parallel op.
        context = contextvars.copy_context()
        run_in_thread(lambda: context.run(self._run))

    def request_stop(self, with_stacks: bool = False) -> None:
        """Ask the loop to end every rank (after taking their stacks, with ``with_stacks``); returns at once."""
        if self._done.is_set():
            return
        self._stop_requested = True
        self._wake(b"t" if with_stacks else b"x")

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
        return self._group.live_ranks if self._group is not None else []

    # -- the thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._meet()
            self._start_ranks()
            self._loop()
            self._carry_out(self._control.settle())
        except BaseException as exc:  # a refused start, or a launcher fault: the ranks must still end
            self._carry_out(self._control.fault(exc))
        finally:
            self._shutdown()

    def _show_waiting(self, text: str) -> None:
        self._record.waiting = text
        self._notify(self._listener.flush)

    def _meet(self) -> None:
        self.master_port = self._meeting.open(lambda: self._stop_requested, self._show_waiting)
        node, nodes = self._meeting.node_rank, self._plan.num_nodes
        why = f"the rendezvous made this kernel node {node} of {nodes} (c10d numbers the nodes as they arrive)"
        self._record.renumber(self._plan.global_rank(0, node), why)
        self._record.places = self._meeting.places()
        self._record.waiting = ""
        self._rendezvous_done = True

    def _start_ranks(self) -> None:
        plan = self._plan
        node_rank = self._meeting.node_rank
        self._group = group = self._starter.rank_group(plan)
        history_thread_born_deaf()  # a fork stops it; restarted by the next cell, it must not take an interrupt
        # every rank's spec is made before the first fork: made after it, each object is a copied page
        specs = [
            [self._starter.rank_spec(plan, self._spec(local, node_rank)) for local in local_ranks]
            for local_ranks in self._starter.groups(plan)
        ]
        for carried in specs:
            if self._stop_requested:
                break
            group.start(carried)
        if self._stop_requested:
            self._control.stop()  # takes effect once started
        self._carry_out(self._control.started())

    def _spec(self, local: int, node_rank: int) -> RankSeat:
        plan = self._plan
        assert self.master_port is not None  # chosen before any rank starts
        environment = plan.environment(local, self.master_port, self.attempt, node_rank)
        return RankSeat(plan.global_rank(local, node_rank), local, environment)

    def _loop(self) -> None:
        group = self._group
        assert group is not None
        refresh = None
        while group.live_ranks or self._control.unpickling:
            deadlines = [d for d in (self._control.deadline(), refresh, self._measures.due()) if d is not None]
            timeout = min(_LONGEST_WAIT, max(0.0, min(deadlines) - time.monotonic())) if deadlines else None
            meeting = self._meeting.waitables()
            ready = wait_readable([self._wake_r, *meeting, *group.waitables()], timeout)
            if self._wake_r in ready:
                self._on_wake()
            if any(item in ready for item in meeting):
                self._meeting.serve()
            group.read([item for item in ready if item != self._wake_r and item not in meeting], self)
            self._carry_out(self._control.tick())
            self._sample_ranks(group)
            delay = self._notify(self._listener.flush)
            refresh = None if delay is None else time.monotonic() + delay

    def _sample_ranks(self, group: RankGroup) -> None:
        """The ranks' CPU and memory into the record when a sample is due; the views are told."""
        due = self._measures.due()
        if due is None or time.monotonic() < due:
            return
        now = time.time()
        for rank, values in self._measures.sample(group.pids()):
            self._tell(Metric(rank, now, values, None))

    def _on_wake(self) -> None:
        """stop(), kill() or stacks() was called from another thread."""
        for byte in os.read(self._wake_r, 64):
            if byte == ord("u"):
                self._take_unpickled()
            elif byte == ord("s"):
                self._carry_out(self._control.ask_stacks())
            elif byte == ord("k"):
                self._carry_out(self._control.kill())
            else:
                self._carry_out(self._control.stop(with_stacks=byte == ord("t")))

    def _carry_out(self, commands: list[Command]) -> None:
        """Do what the controller decided, on the rank group (and the other nodes, the views)."""
        group = self._group
        for command in commands:
            if isinstance(command, ShowStatus):
                self._tell(Status(command.rank, time.time(), command.status))
            elif isinstance(command, TellOtherNodes):
                self._meeting.report_failure(command.text)
            elif group is None:
                continue
            elif isinstance(command, Terminate):
                group.terminate(command.spare)
            elif isinstance(command, Kill):
                group.kill()
            elif isinstance(command, AskStacks):
                group.ask_stacks(command.ranks)

    # -- what the ranks send (RankSink) -----------------------------------------------------------

    def on_event(self, ranks: Sequence[int], event: Any) -> None:
        """One event from a rank. Whatever it holds, the supervisor goes on: an event it cannot
        read or handle is that rank's failure (a ``WorkerError`` saying what it sent)."""
        decoded = decode_event(event, list(ranks))
        if isinstance(decoded, Malformed):
            self._carry_out(self._control.reject(decoded.rank, decoded.why))
            return
        try:
            self._control.activity()
            self._handlers[type(decoded)](decoded)
        except Exception as err:  # a payload the record or a view could not take
            what = f"a {decoded.kind!r} event the kernel could not handle: {type(err).__name__}: {err}"
            self._carry_out(self._control.reject(decoded.rank, what))

    def on_text(self, rank: int, stream: str, text: str) -> None:
        self._control.activity()
        self._record.add_output(rank, stream, text)
        self._tell(Output(rank, time.time(), stream, text))

    def on_live(self, rank: int, stream: str, text: str) -> None:
        self._tell(LiveLine(rank, stream, text))

    def on_exit(self, ranks: Sequence[int], exitcode: int | None, signalled: bool, lost: str | None = None) -> None:
        self._carry_out(self._control.exited(list(ranks), exitcode, signalled, lost))

    def _on_status(self, event: Status) -> None:
        self._record.set_rank_status(event.rank, event.status)
        self._tell(event)

    def _on_output(self, event: Output) -> None:
        self.on_text(event.rank, event.stream, event.text)

    def _on_metric(self, event: Metric) -> None:
        self._record.add_metric(event.rank, event.as_dict(), event.time)
        self._measures.reported(event.rank, event.values)
        self._tell(event)

    def _on_display(self, event: Display) -> None:
        index, replaced = self._record.add_display(event.rank, event.data, event.display_id, event.update)
        self._tell(Shown(event.rank, index, replaced))

    def _on_result(self, event: Result) -> None:
        self._carry_out(self._control.result(event.rank, event.time))
        self._unpickler.submit(event.rank, event.pickled)

    def _take_unpickled(self) -> None:
        for rank, value, error in self._unpickler.take():
            if error is None:
                self._carry_out(self._control.unpickled(rank, value))
            else:
                self._carry_out(self._control.unreadable(rank, error, time.time()))

    def _on_reply(self, event: Reply) -> None:
        self._tell(event)

    def _on_failure(self, event: Failure) -> None:
        self._carry_out(self._control.error(event.rank, rebuild_exception(event.rank, event.report), event.time))

    def _on_stacks(self, event: Stacks) -> None:
        self._carry_out(self._control.stacks(event.rank, event.report))

    # -- the end --------------------------------------------------------------------------------

    def _shutdown(self) -> None:
        group = self._group
        try:
            if group is not None:
                if group.live_ranks:  # after a launcher fault: end them, bounded
                    self._carry_out(self._control.end())
                    group.wait_exits(self._control.kill_at)
                group.close(self)
        finally:
            if self._control.leaves_quietly() and not self._stop_requested:
                self._meeting.leave(lambda: self._stop_requested, self._show_waiting)
            self._meeting.close()
            os.close(self._wake_r)
            os.close(self._wake_w)
            self._starter.cleanup()
            self._record.waiting = ""
            self._finished = True
            self._notify(self._listener.flush)
            try:
                self._on_done()
            finally:
                self._done.set()

    def _tell(self, event: LaunchEvent) -> None:
        """One event to the launch's listeners."""
        self._notify(self._listener.on_event, event)

    def _notify(self, method: Callable[..., _T], *args: Any) -> _T | None:
        try:
            return method(*args)
        except Exception:  # a broken view must not stop the supervision of the ranks
            traceback.print_exc(file=sys.__stderr__)
            return None
