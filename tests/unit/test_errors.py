"""A rank's exception rebuilt in the kernel: its type, message, rank and frames."""

import pickle
import traceback

import pytest

from notebook_launcher.errors import WorkerError, describe_exit
from notebook_launcher.wire import (
    error_report,
    rebuild_exception,
)


@pytest.mark.parametrize(
    "exc, expected_str",
    [
        (ValueError("boom"), "[rank 3] boom"),
        (RuntimeError("a", "b"), "('a', 'b')"),
        (KeyError("missing"), "'missing'"),
        (OSError(2, "No such file"), "[Errno 2] No such file"),
    ],
)
def test_rebuilt_exception_keeps_type_names_rank_and_carries_traceback(exc, expected_str):
    try:
        raise exc
    except Exception as caught:
        report = error_report(caught)
    rebuilt = rebuild_exception(3, report)
    assert type(rebuilt) is type(exc)
    assert str(rebuilt) == expected_str
    if not str(rebuilt).startswith("[rank 3]"):
        assert rebuilt.__notes__ == ["raised on rank 3"]
    last = traceback.extract_tb(rebuilt.__traceback__)[-1]  # the rank's own frames, as a real traceback
    assert (last.name, last.line) == ("test_rebuilt_exception_keeps_type_names_rank_and_carries_traceback", "raise exc")


class NeedsTwo(Exception):
    def __init__(self, a, b):
        super().__init__(f"{a}/{b}")  # args=("a/b",), but unpickling calls NeedsTwo("a/b"): TypeError
        self.b = b


def test_an_exception_whose_init_takes_other_arguments_keeps_its_type():
    try:
        raise NeedsTwo("x", "y") from KeyError("first")
    except NeedsTwo as caught:
        report = error_report(caught)
    assert report["pickled"] is None  # the standard route fails...
    rebuilt = rebuild_exception(0, report)
    assert type(rebuilt) is NeedsTwo  # ...and it comes back all the same
    assert (str(rebuilt), rebuilt.b) == ("[rank 0] x/y", "y")
    assert type(rebuilt.__cause__) is KeyError and rebuilt.__cause__.args == ("first",)


class _Odd(ValueError):
    """Its ``__init__`` does not take its ``args``: it does not unpickle, so the report has its parts."""

    def __init__(self, message, extra):
        super().__init__(message)
        self.extra = extra


def test_a_report_whose_class_cannot_be_loaded_becomes_worker_error_with_the_rank_frames():
    try:
        raise _Odd("odd", 1)
    except ValueError as caught:
        report = error_report(caught)
    assert report["pickled"] is None and report["parts"] is not None
    report["parts"]["cls"] = b"not a pickle either"
    err = rebuild_exception(1, report)
    assert isinstance(err, WorkerError)
    assert str(err).startswith("rank 1 raised _Odd: odd (its class could not be loaded in the kernel")
    assert traceback.extract_tb(err.__traceback__)[-1].line == 'raise _Odd("odd", 1)'
    assert 'raise _Odd("odd", 1)' in err.remote_traceback
    assert pickle.loads(pickle.dumps(err)).rank == 1


def test_a_report_that_unpickles_carries_no_parts():
    """The parts are for an exception that does not load back; one that does is sent once."""
    try:
        raise ValueError("plain")
    except ValueError as caught:
        report = error_report(caught)
    assert report["pickled"] is not None and report["parts"] is None
    assert str(rebuild_exception(0, report)) == "[rank 0] plain"


def _entries(tb):
    while tb is not None:
        yield tb
        tb = tb.tb_next


def test_frames_are_rebuilt_with_their_real_lines_and_library_frames_marked_hidden():
    import json

    from notebook_launcher.tracebacks import frames_of, traceback_from

    try:
        json.loads("{")  # raises inside the standard library
    except ValueError as caught:
        frames = frames_of(caught.__traceback__)
    assert len(frames) > 2 and [frame["library"] for frame in frames] == [False] + [True] * (len(frames) - 1)
    rebuilt = traceback_from(frames)
    entries = traceback.extract_tb(rebuilt)
    assert entries[0].line.startswith('json.loads("{")') and entries[0].lineno == frames[0]["lineno"]
    assert [entry.filename for entry in entries] == [frame["filename"] for frame in frames]
    hidden = [tb.tb_frame.f_locals.get("__tracebackhide__", False) for tb in _entries(rebuilt)]
    assert hidden == [False] + [True] * (len(frames) - 1)
    assert rebuilt.tb_frame.f_code.co_firstlineno == frames[0]["firstlineno"]  # IPython numbers from it


def test_describe_exit_names_signal_and_code():
    assert describe_exit(2, -15) == "rank 2 was killed by signal SIGTERM"
    assert describe_exit(0, 0) == "rank 0 exited with code 0 without returning a result"
