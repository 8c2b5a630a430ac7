"""What a launch tells those who show it, and what they may read of it: two typed interfaces.

``LaunchListener`` is one door: ``on_event(event)`` with a launch's typed, frozen events (the
wire's own ``Status``, ``Output``, ``Metric``, ``Reply``; the record's ``LiveLine`` and ``Shown``;
the launch's ``Started``, ``Finished`` and ``CellWaits``), and ``flush()`` after each batch. Every
front end of a launch goes through it — the cell's views (``frontend.views``), the kernel's
observers of launches (the sidebar), the persistent workers' call router, the users' listeners —
each delivery on its own (``CompositeListener``). It is called by the supervisor's thread (rank
events, ``flush``) and the launch (``Started``, ``Finished``, ``CellWaits``). ``QuietListener``
turns the door into one method per kind (``on_status``, ``on_output``, ...), which the views and
the users' listeners define. ``LaunchState`` is the read side of a launch that they are given:
``Launch`` implements it, and a view needs nothing else. The users' listeners are passed as
``launch(..., listeners=[...])`` or added with ``Launch.subscribe``, and run guarded
(``GuardedListener``).

Examples:
    >>> isinstance(CompositeListener(QuietListener()), LaunchListener)
    True
    >>> hook(Output(0, 0.0, "stdout", "hi\\n"))[0], hook(CellWaits(True))
    ('on_output', ('cell_waits', (True,)))
"""

from __future__ import annotations

import sys
import threading
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..wire.events import Metric, Output, Reply, Status

if TYPE_CHECKING:
    from ..backends.plans import LaunchPlan

__all__ = [
    "LaunchListener",
    "LaunchEvent",
    "Started",
    "Finished",
    "CellWaits",
    "hook",
    "LaunchState",
    "QuietListener",
    "CompositeListener",
    "GuardedListener",
    "Status",
    "Output",
    "LiveLine",
    "Shown",
    "Metric",
    "Reply",
]


@dataclass(frozen=True)
class LiveLine:
    """The line a rank is still writing to ``stream`` (a progress bar's latest frame); "" when none."""

    rank: int
    stream: str
    text: str


@dataclass(frozen=True)
class Shown:
    """A rank called ``display()``: entry ``index`` of its log (``launch.line(rank, index)``) is
    new, or (``replaced``) an update of a display shown before."""

    rank: int
    index: int
    replaced: bool


@dataclass(frozen=True)
class Started:
    """The launch was made (the cell's thread); what ran before can be read from ``launch``."""

    launch: LaunchState


@dataclass(frozen=True)
class Finished:
    """The launch has ended and everything is cleaned up (the supervisor's thread)."""

    launch: LaunchState


@dataclass(frozen=True)
class CellWaits:
    """The thread of the cell that made the launch starts (True) or stops (False) waiting for it;
    a view may leave its last form for that thread to show (``frontend.views.cell_handoff``)."""

    waiting: bool


LaunchEvent = Started | Status | Output | LiveLine | Shown | Metric | Reply | Finished | CellWaits

# each event's method on a ``QuietListener`` (and a user's listener), and what that method takes
_HOOKS: dict[type, tuple[str, str | None]] = {
    Started: ("on_start", "launch"),
    Status: ("on_status", None),
    Output: ("on_output", None),
    LiveLine: ("on_live", None),
    Shown: ("on_display", None),
    Metric: ("on_metric", None),
    Reply: ("on_reply", None),
    Finished: ("on_finish", "launch"),
    CellWaits: ("cell_waits", "waiting"),
}


def hook(event: LaunchEvent) -> tuple[str, tuple[Any, ...]]:
    """The method of a ``QuietListener`` that ``event`` goes to, and its arguments."""
    name, field = _HOOKS[type(event)]
    return name, ((getattr(event, field),) if field else (event,))


class LaunchState(Protocol):
    """The read side of a launch, as its views see it: ``Launch`` and a ``%%dist`` cell's
    ``workers.call_record.CallLaunch`` are ones."""

    id: str
    kind: str  # "launch", "workers" or "call" (a %%dist cell's share of a workers launch)
    cell: int | None
    plan: LaunchPlan
    reports_return_type: bool  # the summary names the type rank 0 returned (a cell's values are shown after it)

    @property
    def failed_rank(self) -> int | None: ...

    @property
    def status(self) -> str: ...

    @property
    def ranks(self) -> list[int]: ...

    @property
    def done(self) -> bool: ...

    @property
    def waited_on(self) -> bool: ...

    @property
    def attempt(self) -> int: ...

    @property
    def waiting(self) -> str: ...

    @property
    def elapsed(self) -> float: ...

    @property
    def exception(self) -> BaseException | None: ...

    @property
    def failure_traceback(self) -> Any: ...

    @property
    def results(self) -> list[Any]: ...

    @property
    def metrics(self) -> list[dict]: ...

    @property
    def stragglers(self) -> dict[int, str]: ...

    @property
    def stopping(self) -> bool: ...

    @property
    def last_stacks(self) -> Any: ...

    def rank_status(self, rank: int) -> str: ...

    def place(self, rank: int) -> Any: ...

    def lines(self, rank: int, start: int = 0, stop: int | None = None) -> list[Any]: ...

    def line(self, rank: int, index: int) -> Any: ...

    def line_count(self, rank: int) -> int: ...

    def interleaved(self, last: int | None = None) -> list[Any]: ...

    def stacks(self, timeout: float = 5.0) -> Any: ...

    def request_stop(self, by: str = "") -> None: ...


@runtime_checkable
class LaunchListener(Protocol):
    """A front end of a launch; each method is called from one thread at a time."""

    def on_event(self, event: LaunchEvent) -> None:
        """One event of the launch (``LaunchEvent``), in order."""

    def flush(self) -> float | None:
        """After each batch of events; None, or seconds after which to be called again anyway."""


class QuietListener:
    """A ``LaunchListener`` with one method per kind of event, each doing nothing: subclasses
    override what they handle.

    ``on_start(launch)``: the launch was made; ``on_status(event)``: ``event.rank`` is now
    ``event.status`` ("running", "done", "failed" or "stopped"); ``on_output``, ``on_live``,
    ``on_display``, ``on_metric``, ``on_reply``: what the ranks sent; ``on_finish(launch)``: it has
    ended; ``cell_waits(waiting)``: the launching cell starts or stops waiting.
    """

    def on_event(self, event: LaunchEvent) -> None:
        name, args = hook(event)
        getattr(self, name)(*args)

    def on_start(self, launch: LaunchState) -> None:
        pass

    def on_status(self, event: Status) -> None:
        pass

    def on_output(self, event: Output) -> None:
        """Complete lines a rank wrote (one or many, each ending with a newline)."""

    def on_metric(self, event: Metric) -> None:
        pass

    def on_live(self, event: LiveLine) -> None:
        """The line a rank is still writing (a progress bar's latest frame); "" when none."""

    def on_display(self, event: Shown) -> None:
        """A rank called ``display()``: entry ``event.index`` of its log is new, or an update."""

    def flush(self) -> float | None:
        """Called after each batch of events, so output is shown in chunks, not line by line.

        Returns None, or seconds after which the view wants to be called again even without events
        (to show what it held back, or to refresh an elapsed time).
        """
        return None

    def on_reply(self, event: Reply) -> None:
        """A persistent worker answered a call (``workers``); views of launches ignore it."""

    def on_finish(self, launch: LaunchState) -> None:
        pass

    def cell_waits(self, waiting: bool) -> None:
        pass


class CompositeListener:
    """Several listeners fed the same events (the cell's view, and the kernel's launch observers).

    Each delivery is its own: a listener that raises is reported (its traceback on the kernel
    process's own stderr, never into a cell's output, which a view may be drawing) and the others
    still get the event; it is called again with the next one (a view's failure to draw one event
    must not blank it for good).

    ``add`` and ``remove`` may be called from any thread while events are delivered: the list is
    replaced, never changed in place, so a delivery in progress goes on with the one it started with.

    Examples:
        >>> class Broken(QuietListener):
        ...     def on_status(self, event): raise RuntimeError("cannot draw")
        >>> class Seen(QuietListener):
        ...     statuses = []
        ...     def on_status(self, event): self.statuses.append(event.status)
        >>> CompositeListener(Broken(), Seen()).on_event(Status(0, 0.0, "running"))
        >>> Seen.statuses
        ['running']
    """

    def __init__(self, *views: LaunchListener) -> None:
        self.views: tuple[LaunchListener, ...] = views
        self._lock = threading.Lock()

    def add(self, view: LaunchListener) -> None:
        with self._lock:
            self.views = (*self.views, view)

    def remove(self, view: LaunchListener) -> None:
        with self._lock:
            self.views = tuple(each for each in self.views if each is not view)

    def _each(self, name: str, *args: Any) -> list[Any]:
        """Call ``name(*args)`` on every listener, each on its own; what each returned."""
        answers = []
        for view in self.views:
            try:
                answers.append(getattr(view, name)(*args))
            except Exception:
                what = hook(args[0])[0] if name == "on_event" else name  # the view's own method
                print(f"notebook_launcher: {type(view).__name__}.{what} raised; the others go on", file=sys.__stderr__)
                traceback.print_exc(file=sys.__stderr__)
        return answers

    def on_event(self, event: LaunchEvent) -> None:
        self._each("on_event", event)

    def flush(self) -> float | None:
        delays = [delay for delay in self._each("flush") if delay is not None]
        return min(delays) if delays else None


class GuardedListener:
    """A listener from outside the launcher, made safe to call from the launch's threads.

    It may define ``on_event(event)`` (every event), or any of ``QuietListener``'s methods, one per
    kind (``on_status``, ``on_output``, ...; the others do nothing). One that raises is
    reported once, with its traceback, on the launch's stderr (the launching cell) and is not called
    again: a user's listener cannot break the launch. ``on_finish`` is delivered once.

    Examples:
        >>> class Count:
        ...     lines = 0
        ...     def on_output(self, event):
        ...         self.lines += event.text.count("\\n")
        >>> count = Count()
        >>> guarded = GuardedListener(count)
        >>> guarded.on_event(Output(0, 0.0, "stdout", "a\\nb\\n")); guarded.on_event(Status(0, 0.0, "done"))
        >>> count.lines
        2
    """

    def __init__(self, listener: Any) -> None:
        self.listener = listener
        self._broken = False
        self._finished = False
        self._finish_lock = threading.Lock()

    def _call(self, name: str, *args: Any) -> Any:
        method = getattr(self.listener, name, None)
        if method is None or self._broken:
            return None
        try:
            return method(*args)
        except Exception as err:
            self._broken = True
            print(
                f"notebook_launcher: the listener {self.listener!r} raised in {name} and is no longer called"
                f" ({type(err).__name__}: {err}); the launch goes on",
                file=sys.stderr,
            )
            traceback.print_exc(file=sys.stderr)
            return None

    def on_event(self, event: LaunchEvent) -> None:
        if isinstance(event, Finished):
            with self._finish_lock:
                if self._finished:
                    return
                self._finished = True
        if getattr(type(self.listener), "on_event", QuietListener.on_event) is not QuietListener.on_event:
            self._call("on_event", event)  # its own door: every event
        else:  # one method per kind (a QuietListener's dispatch is done here, so a report names the method)
            name, args = hook(event)
            self._call(name, *args)

    def flush(self) -> float | None:
        delay = self._call("flush")
        return float(delay) if isinstance(delay, (int, float)) and delay >= 0 else None
