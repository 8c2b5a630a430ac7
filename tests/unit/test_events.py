"""The kernel's typed events: every raw frame a rank can send decodes to one event or to Malformed."""

import dataclasses

import pytest

from notebook_launcher.wire import BadFrame
from notebook_launcher.wire.events import (
    Display,
    Failure,
    Malformed,
    Metric,
    Output,
    Reply,
    Result,
    Stacks,
    Status,
    decode_event,
)

REPORT = {"type": "ValueError", "message": "boom", "text": "Traceback ...\nValueError: boom\n"}


@pytest.mark.parametrize(
    "raw, expected",
    [
        (("status", "running", 2.0, 1), Status(1, 2.0, "running")),
        (("output", ("stderr", "hi\n"), 2.0, 1), Output(1, 2.0, "stderr", "hi\n")),
        (("metric", {"values": {"loss": 0.5}}, 2.0, 1), Metric(1, 2.0, {"loss": 0.5}, None)),
        (
            ("display", {"data": {"text/plain": "x"}, "display_id": "d", "update": 1}, 2.0, 1),
            Display(1, 2.0, {"text/plain": "x"}, "d", True),
        ),
        (("result", bytearray(b"p"), 2.0, 1), Result(1, 2.0, b"p")),
        (("error", REPORT, 2.0, 1), Failure(1, 2.0, REPORT)),
        (("stacks", {"pid": 5, "threads": []}, 2.0, 1), Stacks(1, 2.0, {"pid": 5, "threads": []})),
        (("reply", {"call": 3, "value": b""}, 2.0, None), Reply(0, 2.0, {"call": 3, "value": b""})),
    ],
)
def test_each_kind_decodes_to_its_frozen_event(raw, expected):
    event = decode_event(raw, [0, 1])
    assert event == expected
    assert event.kind == raw[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.rank = 5


class _RaisingEq:
    def __eq__(self, other):
        raise RuntimeError("no")

    __hash__ = object.__hash__


@pytest.mark.parametrize(
    "raw, why",
    [
        (BadFrame("SystemExit: x"), "an event the kernel could not decode (SystemExit: x)"),
        (["status", "running", 1.0, 0], "a malformed event (list)"),
        (("bogus", 1, 1.0, 0), "an event of unknown kind 'bogus'"),
        ((["unhashable"], 1, 1.0, 0), "an event of unknown kind ['unhashable']"),
        (("status", "running", 1.0, 7), "a 'status' event for rank 7, which it does not run"),
        (("status", "running", 1.0, _RaisingEq()), "a 'status' event for rank <"),
        (("status", "running", 1.0, True), "a 'status' event for rank True, which it does not run"),
        (("status", "flying", 1.0, 0), "a 'status' event of the wrong shape (a status must be one of"),
        (("display", {"data": {}}, 1.0, 0), "a 'display' event of the wrong shape (a display payload needs"),
        (("metric", {"values": {"a": "x"}}, 1.0, 0), "metric values must be a dict of names to numbers"),
        (("metric", {"values": {}, "step": 1.5}, 1.0, 0), "a metric's step must be an int, got float"),
        (("result", "not bytes", 1.0, 0), "a result is sent as pickled bytes, got str"),
        (("error", {"type": 1, "message": "", "text": ""}, 1.0, 0), "type, message and text must be str"),
        (("output", ("stdin", "x"), 1.0, 0), "with stream 'stdout' or 'stderr'"),
    ],
)
def test_anything_else_is_malformed_and_says_why_without_raising(raw, why):
    event = decode_event(raw, [0, 1])
    assert isinstance(event, Malformed)
    assert event.rank == 0
    assert why in event.why


def test_a_time_that_is_not_a_number_is_replaced_by_now():
    event = decode_event(("status", "running", "yesterday", 0), [0])
    assert isinstance(event, Status) and event.time > 1e9
