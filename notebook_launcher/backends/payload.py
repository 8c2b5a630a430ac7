"""What a rank started by value loads: the launch's function and arguments, pickled once in the
kernel (cloudpickle: cell-defined functions and classes travel), with the kernel's ``sys.path`` and
global state (what a forked rank would inherit). ``rank.spawn_main.payload_loader`` reads it.

Any backend whose ranks are new interpreters uses it (the spawn start method, Ray's actors, a
backend of another package): an argument that cannot be pickled is reported by name before
anything starts.

Examples:
    >>> import pickle
    >>> data = payload_file_bytes(print, (1, 2))
    >>> isinstance(pickle.loads(data), list)   # the kernel's sys.path comes first
    True
"""

from __future__ import annotations

import pickle
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import LaunchError
from ..rank.global_state import GlobalState
from ..wire import by_value

__all__ = ["payload_file_bytes", "pickle_payload"]


def payload_file_bytes(
    function: Callable[..., Any],
    args: Sequence[Any],
    how: str = "start_method='spawn'",
    instead: str = "start_method='fork'",
) -> bytes:
    """What a rank started by value loads (``rank.spawn_main.payload_loader``): the kernel's
    ``sys.path``, its global state (what a forked rank would inherit) and the pickled function and
    arguments. Raises as ``pickle_payload`` does."""
    payload = pickle_payload(function, args, how, instead)
    return pickle.dumps(list(sys.path)) + pickle.dumps(GlobalState.capture()) + payload


def pickle_payload(
    function: Callable[..., Any],
    args: Sequence[Any],
    how: str = "start_method='spawn'",
    instead: str = "start_method='fork'",
) -> bytes:
    """cloudpickle ``(function, args)``; on failure name the part that cannot be pickled.

    Raises:
        LaunchError: "argument 1 (a generator) cannot be pickled for start_method='spawn': ..."
    """
    try:
        return by_value.dumps((function, tuple(args)))
    except Exception as err:
        culprit = _unpicklable_part(function, args) or "the function or its arguments"
        raise LaunchError(
            f"{culprit} cannot be pickled for {how}: {type(err).__name__}: {err}."
            f" Build it inside the function, or use {instead}"
        ) from err


def _unpicklable_part(function: Callable[..., Any], args: Sequence[Any]) -> str | None:
    parts = [("the function", function)] + [(f"argument {i}", arg) for i, arg in enumerate(args)]
    for label, value in parts:
        try:
            by_value.dumps(value)
        except Exception:
            return f"{label} ({type(value).__qualname__})"
    return None
