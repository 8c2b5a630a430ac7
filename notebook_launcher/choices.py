"""The launcher's vocabulary in one place: the valid choices of each argument, the statuses a rank
and a launch go through, and the one check (with one wording) that every argument goes through.

The sidebar receives the same lists through the comm protocol, so the front end never keeps a copy.

Examples:
    >>> check_choice("start_method", "fork", START_METHODS)
    >>> check_choice("start_method", "thread", START_METHODS)
    Traceback (most recent call last):
    ...
    ValueError: start_method='thread' is not valid; use one of 'auto', 'fork', 'spawn'
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Literal, get_args

__all__ = [
    "switched_on",
    "FLUSH_INTERVAL",
    "STRAGGLER_TIMEOUT",
    "is_int",
    "START_METHODS",
    "MIXED_PRECISIONS",
    "DEVICES",
    "DISPLAYS",
    "RANK_STATUSES",
    "RankStatus",
    "LaunchStatus",
    "LAUNCH_STATUSES",
    "check_choice",
]

START_METHODS = ("auto", "fork", "spawn")
MIXED_PRECISIONS = ("no", "fp16", "bf16")
DEVICES = ("auto", "cpu", "cuda", "xla", "tpu")
DISPLAYS = ("auto", "widget", "text", "none")

FLUSH_INTERVAL = 0.05  # seconds between a rank's output flushes (NOTEBOOK_LAUNCHER_FLUSH_INTERVAL overrides it)
STRAGGLER_TIMEOUT = 300.0  # the default: long enough for a main-process-only save or evaluation

RankStatus = Literal["starting", "running", "done", "failed", "stopped"]
LaunchStatus = Literal["starting", "running", "succeeded", "failed", "stopped"]
RANK_STATUSES: tuple[RankStatus, ...] = get_args(RankStatus)
LAUNCH_STATUSES: tuple[LaunchStatus, ...] = get_args(LaunchStatus)


OFF_WORDS = ("off", "0", "no", "false")


def switched_on(variable: str, environ: Mapping[str, str] = os.environ, default: bool = True) -> bool:
    """Whether a feature the environment variable ``variable`` switches is on: ``default`` when the
    variable is unset, else on unless it reads off, 0, no or false.

    Examples:
        >>> switched_on("NOTEBOOK_LAUNCHER_MEASURES", {}), switched_on("X", {"X": " Off"})
        (True, False)
        >>> switched_on("X", {}, default=False), switched_on("X", {"X": "on"}, default=False)
        (False, True)
    """
    if variable not in environ:
        return default
    return environ[variable].strip().lower() not in OFF_WORDS


def is_int(value: Any) -> bool:
    """Whether ``value`` is an int and not a bool (``True`` is no count of processes).

    Examples:
        >>> is_int(2), is_int(True), is_int(2.0)
        (True, False, False)
    """
    return isinstance(value, int) and not isinstance(value, bool)


def check_choice(name: str, value: Any, choices: Sequence[Any]) -> None:
    """Raise ``ValueError`` naming the argument, the value and the valid choices when ``value`` is not one."""
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not valid; use one of {', '.join(map(repr, choices))}")
