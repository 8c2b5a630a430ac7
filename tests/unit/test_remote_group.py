"""``backends.remote.RemoteRankGroup``: carriers that report from threads of their own, read by the
supervisor through one wake pipe with the same decoders as local ranks. The carriers here are
threads (what a backend's relay or reader thread does); nothing is mocked of the group itself."""

from __future__ import annotations

import os
import threading
import time

import pytest

from notebook_launcher.backends.remote import RemoteRankGroup
from notebook_launcher.wire import OUTPUT
from notebook_launcher.wire.channel import ChannelWriter
from notebook_launcher.wire.readiness import wait_readable
from notebook_launcher.wire.spec import RankSpec


class Sink:
    def __init__(self) -> None:
        self.seen: list[tuple] = []

    def on_event(self, ranks, event):
        self.seen.append(("event", tuple(ranks), event))

    def on_text(self, rank, stream, text):
        self.seen.append(("text", rank, stream, text))

    def on_live(self, rank, stream, text):
        pass

    def on_exit(self, ranks, exitcode, signalled, lost=None):
        self.seen.append(("exit", tuple(ranks), exitcode, signalled, lost))


def spec(rank: int) -> RankSpec:
    return RankSpec(rank, rank, {}, parent_pid=0, threads=1)


class Scripted(RemoteRankGroup):
    """Each carrier runs ``script(group, carrier)`` on a thread; signals are recorded, and a
    carrier ends on ``kill`` unless ``deaf``."""

    def __init__(self, script, deaf: bool = False, grace_period: float = 0.05) -> None:
        super().__init__(grace_period)
        self.script = script
        self.deaf = deaf
        self.signals: list[tuple[int, str]] = []
        self.abandoned: list[int] = []
        self.threads: list[threading.Thread] = []

    def _start_carrier(self, carrier, specs):
        carrier.handle = threading.Event()  # set: the carrier is told to end
        thread = threading.Thread(target=self.script, args=(self, carrier), daemon=True)
        thread.start()
        self.threads.append(thread)

    def _signal(self, carrier, what):
        self.signals.append((carrier.first_rank, what))
        if what == "kill" and not self.deaf:
            carrier.handle.set()

    def _abandon(self, carrier):
        self.abandoned.append(carrier.first_rank)
        carrier.handle.set()

    def _join(self):
        for thread in self.threads:
            thread.join()


def frames(*events: tuple) -> bytes:
    """What a rank's channel writes for ``events`` ((kind, payload) each), as rank 0."""
    read_end, write_end = os.pipe()
    try:
        writer = ChannelWriter(write_end, rank=0)
        for kind, payload in events:
            writer.send(kind, payload)
        return os.read(read_end, 1 << 16)
    finally:
        os.close(read_end)
        os.close(write_end)


def read_until_done(group, sink, limit=30.0):
    deadline = time.monotonic() + limit
    while group.live_ranks:
        assert time.monotonic() < deadline, "the group never ended"
        group.read(wait_readable(group.waitables(), 1.0), sink)


def test_each_carriers_bytes_come_in_order_then_its_exit_and_an_open_line_ends_it():
    def script(group, carrier):
        rank = carrier.first_rank
        for i in range(200):
            group.deliver(carrier, "stdout", f"{rank}:{i}\n".encode())
        group.deliver(carrier, "stderr", b"no newline")
        group.ended(carrier, rank)

    group, sink = Scripted(script), Sink()
    for rank in range(4):
        group.start([spec(rank)])
    read_until_done(group, sink)
    group.close(sink)
    for rank in range(4):
        mine = [item for item in sink.seen if rank in item[1:2] or item[1:2] == ((rank,),)]
        texts = "".join(item[3] for item in mine if item[0] == "text" and item[2] == "stdout")
        assert texts == "".join(f"{rank}:{i}\n" for i in range(200))
        assert mine[-2:] == [("text", rank, "stderr", "no newline\n"), ("exit", (rank,), rank, False, None)]


def test_events_are_decoded_frame_by_frame_even_split_across_deliveries():
    data = frames((OUTPUT, ("stdout", b"from python\n")), ("custom", [1, 2]))

    def script(group, carrier):
        for cut in range(0, len(data), 7):
            group.deliver(carrier, "events", data[cut : cut + 7])
        group.ended(carrier, 0)

    group, sink = Scripted(script), Sink()
    group.start([spec(0)])
    read_until_done(group, sink)
    group.close(sink)
    text, event, exit_ = sink.seen
    assert text == ("text", 0, "stdout", "from python\n")
    assert event[:2] == ("event", (0,)) and (event[2][0], event[2][1], event[2][3]) == ("custom", [1, 2], 0)
    assert exit_ == ("exit", (0,), 0, False, None)


def test_terminate_spares_ranks_that_reported_and_a_deaf_carrier_is_abandoned_after_the_kill():
    def script(group, carrier):
        carrier.handle.wait()
        group.ended(carrier, -9, "gone" if carrier.first_rank == 1 else None)

    group, sink = Scripted(script, deaf=True), Sink()
    group.answer_within = 0.1
    group.start([spec(0)])
    group.start([spec(1)])
    group.terminate(spare=[0])
    assert group.signals == [(1, "terminate")]
    group.wait_exits(time.monotonic() + 0.05)
    assert group.signals[1:] == [(0, "kill"), (1, "kill")] and group.abandoned == [0, 1]
    group.read(group.waitables(), sink)
    # the two carriers' threads end in either order once abandoned: each exit is reported, in any order
    assert sorted(sink.seen) == [("exit", (0,), -9, True, None), ("exit", (1,), -9, True, "gone")]
    assert group.live_ranks == []
    group.close(sink)


def test_what_arrives_after_the_end_is_delivered_by_close_without_an_exit():
    release = threading.Event()

    def script(group, carrier):
        release.wait()
        group.deliver(carrier, "stdout", b"last words")
        group.ended(carrier, 0)

    group, sink = Scripted(script), Sink()
    group.start([spec(0)])
    release.set()
    group.close(sink)
    assert sink.seen == [("text", 0, "stdout", "last words\n")]


def test_an_unknown_stream_is_refused():
    group = Scripted(lambda group, carrier: None)
    group.start([spec(0)])
    with pytest.raises(ValueError, match="stream must be one of"):
        group.deliver(group._carriers[0], "stdin", b"x")
