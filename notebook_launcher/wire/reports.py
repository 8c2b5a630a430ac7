"""A rank's exception, sent as builtins and rebuilt in the kernel as the same exception.

The rank reports a failure with ``error_report``: the type's name, the message, the traceback as
text and as frames, the pickled exception and its parts (for classes whose ``__init__`` does not
take their ``args``). The kernel turns the report back into an exception with ``rebuild_exception``:
the rank's own type wherever its class can be loaded, raised with the rank's frames.

Examples:
    >>> rebuilt = rebuild_exception(1, error_report(ValueError("boom")))
    >>> type(rebuilt).__name__, str(rebuilt)
    ('ValueError', '[rank 1] boom')
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from typing import Any

from ..errors import WorkerError, WorkerTraceback
from ..tracebacks import frames_of, repeats_note, traceback_from
from .shared_tensors import TensorSharer, keeping_files
from .values import dumps_for_kernel, new_sharer

__all__ = ["error_report", "rebuild_exception"]


def error_report(exc: BaseException, skip_frame: Any = None, depth: int = 0) -> dict:
    """A rank's exception as builtins, for the kernel to rebuild (``rebuild_exception``).

    It carries the type's name, the message, the traceback as text and as frames (as
    builtins, so the kernel can raise the exception with the rank's own frames: ``tracebacks``), the
    pickled exception (large tensors it holds through shared memory, as a returned value's), or
    when that does not load back, its parts (class, args, attributes: for classes whose ``__init__``
    does not take their ``args``), and, up to three levels, the exception it was raised from.
    ``skip_frame`` is a code object whose frame is left out (the bootstrap's own).

    Examples:
        >>> report = error_report(ValueError("boom"))
        >>> report["type"], report["message"]
        ('ValueError', 'boom')
    """
    import traceback

    tb = exc.__traceback__
    if tb is not None and tb.tb_frame.f_code is skip_frame:
        tb = tb.tb_next
    chained, kind = _chained(exc)
    return {
        "type": type(exc).__qualname__,
        "message": _message(exc),
        "text": "".join(traceback.format_exception(type(exc), exc, tb, chain=False)),
        "frames": frames_of(tb),
        "pickled": (pickled := _pickle_exception(exc, sharer := new_sharer())),
        "parts": _exception_parts(exc, sharer) if pickled is None else None,
        "chained": error_report(chained, depth=depth + 1) if chained is not None and depth < 3 else None,
        "chain_kind": kind,
    }


def _message(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception as err:  # a broken __str__ must not lose the report
        return f"<str() failed: {type(err).__name__}>"


def _chained(exc: BaseException) -> tuple[BaseException | None, str | None]:
    if exc.__cause__ is not None:
        return exc.__cause__, "cause"
    if exc.__context__ is not None and not exc.__suppress_context__:
        return exc.__context__, "context"
    return None, None


def _pickle_exception(exc: BaseException, sharer: TensorSharer | None) -> bytes | None:
    """Bytes that load back here (their shared files left for the kernel), or None."""
    try:
        data = dumps_for_kernel(exc, sharer=sharer)
        with keeping_files():
            pickle.loads(data)
    except BaseException:  # SystemExit from a __reduce__ too: the kernel rebuilds it from its parts
        return None
    return data


def _exception_parts(exc: BaseException, sharer: TensorSharer | None) -> dict | None:
    """Class, args and attributes, pickled one by one (attributes that cannot be pickled are left
    out); large tensors in the files the whole exception's pickling wrote."""
    try:
        state = {}
        for name, value in vars(exc).items():
            try:
                state[name] = dumps_for_kernel(value, sharer=sharer)
            except Exception:
                continue
        return {
            "cls": dumps_for_kernel(type(exc), sharer=sharer),
            "args": dumps_for_kernel(exc.args, sharer=sharer),
            "state": state,
        }
    except Exception:
        return None


_NOT_REBUILT = (SystemExit, KeyboardInterrupt, GeneratorExit)


def rebuild_exception(rank: int, report: Mapping[str, Any]) -> BaseException:
    """Turn a rank's error report into the exception to raise in the kernel.

    The exception comes back as its own type, even when its ``__init__`` takes other arguments than
    its ``args`` (it is then made without calling ``__init__``: args, attributes and notes restored),
    with its message prefixed by ``[rank N]`` and the rank's frames as its traceback, so IPython
    shows them like a local error. A ``WorkerError`` (with the same traceback) only when the class
    cannot be loaded in the kernel, or for exits and interrupts.

    Args:
        rank: the global rank that raised.
        report: the dict a rank sends (``error_report``).

    Examples:
        >>> report = error_report(ValueError("boom"))
        >>> exc = rebuild_exception(1, report)
        >>> type(exc).__name__, str(exc)
        ('ValueError', '[rank 1] boom')
    """
    exc = _rebuild(rank, report)
    _name_the_rank(exc, rank)
    return exc


def _rebuild(rank: int, report: Mapping[str, Any]) -> BaseException:
    tb = traceback_from(report.get("frames") or [])
    exc, why = _unpickle(report.get("pickled"))
    if exc is None:
        exc, why = _from_parts(report.get("parts"), why)
    if exc is not None and not _printable(exc):
        exc, why = None, "its str() raised in the kernel"
    if exc is None or isinstance(exc, _NOT_REBUILT):
        why = why or f"{report['type']} is not re-raised in the kernel"
        error = WorkerError(
            rank,
            f"rank {rank} raised {report['type']}: {report['message']} ({why})",
            exc_type=report["type"],
            remote_traceback=report["text"],
        )
        return error.with_traceback(tb)
    chained = report.get("chained")
    if chained is not None:
        earlier = _rebuild(rank, chained)
        if report.get("chain_kind") == "cause":
            exc.__cause__ = earlier
        else:
            exc.__context__ = earlier
    elif tb is None and report.get("text"):
        exc.__cause__ = WorkerTraceback(report["text"])  # no frames: show the rank's traceback as text
    exc.__suppress_context__ = report.get("chain_kind") == "cause" or exc.__cause__ is not None
    note = repeats_note(report.get("frames") or [])
    if note and hasattr(exc, "add_note"):
        exc.add_note(note)
    return exc.with_traceback(tb)


def _printable(exc: BaseException) -> bool:
    """Whether the kernel can show ``exc``: its ``str`` and ``repr`` must work."""
    try:
        str(exc)
        repr(exc)
    except Exception:
        return False
    return True


def _unpickle(data: bytes | None) -> tuple[BaseException | None, str | None]:
    if data is None:
        return None, "it could not be pickled in the rank"
    try:
        exc = pickle.loads(data)
    except BaseException as err:  # SystemExit from a __reduce__ too: "cannot rebuild"; the report has the text
        return None, f"it could not be unpickled in the kernel: {type(err).__name__}: {err}"
    if not isinstance(exc, BaseException):
        return None, "the report held no exception"
    return exc, None


def _from_parts(parts: dict | None, why: str | None) -> tuple[BaseException | None, str | None]:
    """Make the exception without calling ``__init__``: class, then args and attributes."""
    if parts is None:
        return None, why
    try:
        cls = pickle.loads(parts["cls"])
    except BaseException as err:
        return None, f"its class could not be loaded in the kernel: {type(err).__name__}: {err}"
    if not (isinstance(cls, type) and issubclass(cls, BaseException)):
        return None, "the report held no exception class"
    try:
        exc = cls.__new__(cls)
        exc.args = pickle.loads(parts["args"])
        for name, data in parts["state"].items():
            try:
                setattr(exc, name, pickle.loads(data))
            except BaseException:
                continue
    except BaseException as err:
        return None, f"it could not be rebuilt in the kernel: {type(err).__name__}: {err}"
    return exc, None


def _name_the_rank(exc: BaseException, rank: int) -> None:
    """Prefix the message with the rank when the message is the first argument; else add a note."""
    if isinstance(exc, WorkerError):
        return
    prefix = f"[rank {rank}] "
    args = exc.args
    try:
        if args and isinstance(args[0], str) and str(exc) == args[0]:
            exc.args = (prefix + args[0], *args[1:])
            if str(exc).startswith(prefix):
                return
            exc.args = args
    except Exception:  # a __str__ that fails on the changed args: fall back to a note
        exc.args = args
    if hasattr(exc, "add_note") and f"raised on rank {rank}" not in getattr(exc, "__notes__", ()):
        exc.add_note(f"raised on rank {rank}")
