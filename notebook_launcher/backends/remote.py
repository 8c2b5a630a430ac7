"""A ``RankGroup`` for ranks the kernel cannot wait on as local descriptors: a cluster's actors, a
scheduler's jobs, a backend's own subprocesses read by threads.

Whatever carries the ranks, its bytes reach the kernel from threads of the backend's own (a long
poll, a reader of a socket or of a subprocess's pipes). They put them into one thread-safe inbox
(``deliver``, then ``ended`` once the carrier is gone) and one wake pipe makes the supervisor's wait
return; ``read`` then decodes them in the order they arrived with the same decoders as a local
rank's (``carrier_streams``), so the log, the live rows and the events are the same whatever the
backend. A subclass writes only what differs: how a carrier starts (``_start_carrier``), how it is
signalled (``_signal``) and what to do with one that no longer answers (``_abandon``).

Examples:
    >>> class Echo(RemoteRankGroup):
    ...     def _start_carrier(self, carrier, specs):
    ...         self.deliver(carrier, "stdout", b"hello\\n")
    ...         self.ended(carrier, 0)
    ...     def _signal(self, carrier, what):
    ...         pass
    >>> class Sink:
    ...     def on_text(self, rank, stream, text): print(rank, stream, repr(text))
    ...     def on_live(self, rank, stream, text): pass
    ...     def on_exit(self, ranks, code, signalled, lost=None): print("exit", ranks, code)
    >>> group = Echo(grace_period=1.0)
    >>> group.start([type("Spec", (), {"rank": 0})()])
    >>> group.read(group.waitables(), Sink())
    0 stdout 'hello\\n'
    exit [0] 0
    >>> group.live_ranks
    []
    >>> group.close(Sink())
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any, Literal

from .base import RankSink
from .carrier_streams import STREAMS, CarrierStreams

if TYPE_CHECKING:
    from ..wire.spec import RankSpec

__all__ = ["Carrier", "RemoteRankGroup", "Signal"]

Signal = Literal["stacks", "terminate", "kill"]


class Carrier:
    """One started carrier of ``ranks``, as the group knows it; ``handle`` is the subclass's own."""

    def __init__(self, ranks: Sequence[int]) -> None:
        self.ranks = list(ranks)
        self.streams = CarrierStreams(ranks)
        self.handle: Any = None
        self.exitcode: int | None = None  # set once its end was read
        self.signalled = False  # the launcher ended it
        self.lost: str | None = None  # what took it, when not the rank itself
        self.gone = False  # its end is in the inbox (set by ``ended``, under the group's lock)

    @property
    def first_rank(self) -> int:
        return self.ranks[0]


class RemoteRankGroup:
    """The reading half of a ``RankGroup`` whose carriers report from threads (module docstring)."""

    answer_within = 10.0  # seconds past the grace period a killed carrier may take to say it ended

    def __init__(self, grace_period: float) -> None:
        self._grace = grace_period
        self._carriers: list[Carrier] = []
        self._inbox: deque[tuple[Carrier, str, Any]] = deque()
        self._changed = threading.Condition()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)

    # -- what a subclass writes ---------------------------------------------------------------------

    def _start_carrier(self, carrier: Carrier, specs: list[RankSpec]) -> None:
        """Start the carrier of ``specs``' ranks; from then on, its threads call ``deliver`` and,
        exactly once, ``ended``. Raise if it could not start."""
        raise NotImplementedError

    def _signal(self, carrier: Carrier, what: Signal) -> None:
        """Ask the carrier's ranks for their stacks, or end them (SIGTERM, SIGKILL), with what
        they started."""
        raise NotImplementedError

    def _abandon(self, carrier: Carrier) -> None:
        """The carrier did not end within its grace period after a kill: make its thread call
        ``ended`` now (close its connection, kill its actor), whatever became of the ranks."""

    def _join(self) -> None:
        """Every carrier has ended: wait for the backend's threads (each has called ``ended``)."""

    # -- what the backend's threads call -----------------------------------------------------------

    def deliver(self, carrier: Carrier, stream: str, data: bytes) -> None:
        """Bytes the carrier sent on ``stream`` ("events", "stdout" or "stderr"), in order."""
        if stream not in STREAMS:
            raise ValueError(f"stream must be one of {STREAMS}, not {stream!r}")
        if data:
            self._put(carrier, stream, bytes(data))

    def ended(self, carrier: Carrier, exitcode: int, lost: str | None = None) -> None:
        """The carrier ended with ``exitcode`` after everything it sent was delivered; ``lost``:
        what took it, when that was not the rank itself (its node died)."""
        self._put(carrier, "exit", (exitcode, lost))

    def _put(self, carrier: Carrier, kind: str, item: Any) -> None:
        with self._changed:
            carrier.gone = carrier.gone or kind == "exit"
            self._inbox.append((carrier, kind, item))
            self._changed.notify_all()
        try:
            os.write(self._wake_w, b"!")
        except (BlockingIOError, OSError):  # full (the supervisor will read it all) or closed (ended)
            pass

    # -- the RankGroup ------------------------------------------------------------------------------

    def start(self, specs: list[RankSpec]) -> None:
        carrier = Carrier([spec.rank for spec in specs])
        self._start_carrier(carrier, specs)
        self._carriers.append(carrier)

    @property
    def live_ranks(self) -> list[int]:
        return [rank for carrier in self._live() for rank in carrier.ranks]

    def waitables(self) -> list[Any]:
        return [self._wake_r] if self._live() else []

    def read(self, ready: list[Any], sink: RankSink) -> None:
        if self._wake_r not in ready:
            return
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass
        self._take(sink, exits=True)

    def pids(self) -> dict[int, int]:
        """None of its ranks is a process the kernel can read."""
        return {}

    def ask_stacks(self, ranks: Sequence[int]) -> None:
        for carrier in self._live():
            if any(rank in ranks for rank in carrier.ranks):
                self._signal(carrier, "stacks")

    def terminate(self, spare: Collection[int] = ()) -> None:
        for carrier in self._mark_signalled(spare):
            self._signal(carrier, "terminate")

    def kill(self) -> None:
        for carrier in self._mark_signalled():
            self._signal(carrier, "kill")

    def wait_exits(self, deadline: float | None) -> None:
        """Wait for the live carriers to end until ``deadline``; kill the rest, then give up on
        those that do not answer within the grace period (``_abandon``)."""
        if not self._wait_gone(deadline or time.monotonic()):
            self.kill()
            if not self._wait_gone(time.monotonic() + self._grace + self.answer_within):
                for carrier in self._live():
                    if not carrier.gone:
                        self._abandon(carrier)
                self._wait_gone(None)

    def close(self, sink: RankSink) -> None:
        """Deliver what is left (the ends of carriers that ended at shutdown are not reported as
        exits: the launch is over), then release the wake pipe."""
        self._join()
        self._take(sink, exits=False)
        for carrier in self._carriers:
            if carrier.exitcode is None:
                carrier.streams.finish(sink)
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)

    # -- inside ---------------------------------------------------------------------------------------

    def _take(self, sink: RankSink, exits: bool) -> None:
        while True:
            with self._changed:
                if not self._inbox:
                    return
                carrier, kind, item = self._inbox.popleft()
            if carrier.exitcode is not None:
                continue
            if kind != "exit":
                carrier.streams.feed(kind, item, sink)
                continue
            code, lost = item
            carrier.lost = carrier.lost or lost
            carrier.exitcode = code
            carrier.streams.finish(sink)
            if exits:
                sink.on_exit(carrier.ranks, code, carrier.signalled, carrier.lost)

    def _live(self) -> list[Carrier]:
        return [carrier for carrier in self._carriers if carrier.exitcode is None]

    def _mark_signalled(self, spare: Collection[int] = ()) -> list[Carrier]:
        live = [carrier for carrier in self._live() if not set(carrier.ranks) <= set(spare)]
        for carrier in live:
            carrier.signalled = True
        return live

    def _wait_gone(self, deadline: float | None) -> bool:
        """Whether every live carrier has ended (its end in the inbox) by ``deadline``."""
        with self._changed:
            while not all(carrier.gone for carrier in self._live()):
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._changed.wait(remaining)
        return True
