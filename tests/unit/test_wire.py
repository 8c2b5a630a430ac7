"""The wire's pure parts: channel framing, line splitting, pickling for the kernel, display payloads."""

import os
import pickle
import threading

import cloudpickle

from notebook_launcher.wire import (
    ChannelWriter,
    FrameReader,
    LineReader,
    dumps_for_kernel,
)


def test_frames_survive_arbitrary_chunking_and_large_payloads():
    r, w = os.pipe()
    writer = ChannelWriter(w)
    big = os.urandom(300_000)
    sender = threading.Thread(target=lambda: [writer.send("result", big), writer.send("status", "x"), writer.close()])
    sender.start()
    reader, events = FrameReader(), []
    while chunk := os.read(r, 7919):
        events.extend(reader.feed(chunk))
    sender.join()
    os.close(r)
    assert [(kind, payload) for kind, payload, _, _ in events] == [("result", big), ("status", "x")]


def test_a_partial_frame_yields_nothing():
    r, w = os.pipe()
    ChannelWriter(w).send("status", "running")
    data = os.read(r, 4096)
    assert FrameReader().feed(data[:-1]) == []


def test_lines_split_across_chunks_and_multibyte_characters():
    lines = LineReader()
    text = "héllo wörld\nsecond"
    data = text.encode()
    out = "".join(lines.feed(data[i : i + 1]) for i in range(len(data))) + lines.finish()
    assert out == "héllo wörld\nsecond\n"


def test_invalid_utf8_is_replaced_not_fatal():
    assert LineReader().feed(b"bad \xff byte\n") == "bad \ufffd byte\n"


def test_dumps_for_kernel_falls_back_to_cloudpickle_for_local_classes():
    def make():
        class Local:
            pass

        return Local()

    data = dumps_for_kernel(make())
    assert type(pickle.loads(data)).__name__ == "Local"
    assert dumps_for_kernel([1, 2]) == pickle.dumps([1, 2], protocol=pickle.HIGHEST_PROTOCOL)


def test_cloudpickle_tracker_maps_classes_back():
    """The property spawn relies on: a class sent by value comes back as the very same class."""

    class Sent:
        pass

    copy = cloudpickle.loads(cloudpickle.dumps(Sent))
    assert cloudpickle.loads(cloudpickle.dumps(copy())).__class__ is Sent


def test_carriage_returns_rewrite_the_line():
    lines = LineReader()
    assert lines.feed(b"10%\r50%") == "" and lines.live == "50%"
    assert lines.feed(b"\r100%\r\n") == ""  # a bar's row, held until a later line shows no bar comes back to it
    assert lines.feed(b"windows line\r\nplain\n") == "100%\nwindows line\nplain\n"


def test_a_display_with_nothing_the_launch_shows_is_not_sent():
    """The kernel refuses an empty bundle as a malformed event (the rank's failure): an object that
    displayed itself, or one with only formats the launch does not show, sends nothing."""
    from notebook_launcher.rank.displays import send_display

    sent = []
    channel = type("Channel", (), {"send": lambda self, *event: sent.append(event)})()
    send_display(channel, {}, None, False)
    send_display(channel, {"application/json": {"a": 1}}, None, False)
    assert sent == []
    send_display(channel, {"application/json": {}, "text/plain": "shown"}, "d1", True)
    assert sent == [("display", {"data": {"text/plain": "shown"}, "display_id": "d1", "update": True})]
