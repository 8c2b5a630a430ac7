"""When a failed attempt of a launch is started again (``max_restarts``), and what the last failure
says of the attempts before it. Pure rules, tested alone.

Examples:
    >>> from notebook_launcher.backends.plans import FaultPolicy
    >>> may_restart(FaultPolicy(max_restarts=1), ValueError("x"), attempt=0, started=0.0, now=5.0)
    True
    >>> may_restart(FaultPolicy(max_restarts=1), ValueError("x"), attempt=1, started=0.0, now=5.0)
    False
"""

from __future__ import annotations

from ..backends.plans import FaultPolicy
from ..errors import LaunchTimeout

__all__ = ["may_restart", "restart_delay", "attempts_note"]

FIRST_BACKOFF = 0.5  # seconds before the second restart; each later one waits twice as long as the one before
LONGEST_BACKOFF = 8.0


def may_restart(faults: FaultPolicy, failure: BaseException, attempt: int, started: float, now: float) -> bool:
    """Restarts left, and time left: ``timeout`` ends the launch (``started`` at), not an attempt."""
    if attempt >= faults.max_restarts or isinstance(failure, LaunchTimeout):
        return False
    return faults.timeout is None or now < started + faults.timeout


def restart_delay(faults: FaultPolicy, attempt: int, started: float, now: float) -> float:
    """Seconds to wait before starting attempt ``attempt + 1``: none before the first restart, then
    0.5, 1, 2, 4 and at most 8, and never past the launch's ``timeout``. A rank that fails at once
    with ``max_restarts=100`` restarted 16 times a second, busying the machine and flooding the log.

    Examples:
        >>> from notebook_launcher.backends.plans import FaultPolicy
        >>> [restart_delay(FaultPolicy(max_restarts=9), n, started=0.0, now=0.0) for n in range(7)]
        [0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 8.0]
        >>> restart_delay(FaultPolicy(max_restarts=9, timeout=10.0), 4, started=0.0, now=9.0)
        1.0
    """
    delay = 0.0 if attempt == 0 else min(LONGEST_BACKOFF, FIRST_BACKOFF * 2 ** (attempt - 1))
    if faults.timeout is not None:
        delay = min(delay, max(0.0, started + faults.timeout - now))
    return delay


def attempts_note(past: list, attempt: int, rank: int | None, failure: BaseException) -> str:
    """The note on the last failure that lists every attempt's failure (``past``: (attempt, rank, exception))."""
    lines = [f"every attempt failed ({attempt + 1} of them, max_restarts={attempt}):"]
    lines += [f"  attempt {index}: rank {failed}: {type(exc).__name__}: {exc}" for index, failed, exc in past]
    lines.append(f"  attempt {attempt}: rank {rank}: {type(failure).__name__}: {failure}")
    return "\n".join(lines)
