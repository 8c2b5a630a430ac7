"""When a failed attempt of a launch is started again (``max_restarts``), and what the last failure
says of the attempts before it. Pure rules, tested alone.

Examples:
    >>> from notebook_launcher.launching.plan import FaultPolicy
    >>> may_restart(FaultPolicy(max_restarts=1), ValueError("x"), attempt=0, started=0.0, now=5.0)
    True
    >>> may_restart(FaultPolicy(max_restarts=1), ValueError("x"), attempt=1, started=0.0, now=5.0)
    False
"""

from __future__ import annotations

from ..errors import LaunchTimeout
from .plan import FaultPolicy

__all__ = ["may_restart", "attempts_note"]


def may_restart(faults: FaultPolicy, failure: BaseException, attempt: int, started: float, now: float) -> bool:
    """Restarts left, and time left: ``timeout`` ends the launch (``started`` at), not an attempt."""
    if attempt >= faults.max_restarts or isinstance(failure, LaunchTimeout):
        return False
    return faults.timeout is None or now < started + faults.timeout


def attempts_note(past: list, attempt: int, rank: int | None, failure: BaseException) -> str:
    """The note on the last failure that lists every attempt's failure (``past``: (attempt, rank, exception))."""
    lines = [f"every attempt failed ({attempt + 1} of them, max_restarts={attempt}):"]
    lines += [f"  attempt {index}: rank {failed}: {type(exc).__name__}: {exc}" for index, failed, exc in past]
    lines.append(f"  attempt {attempt}: rank {rank}: {type(failure).__name__}: {failure}")
    return "\n".join(lines)
