"""When a launch has gone on too long: no sign of life for ``stall_timeout`` seconds, ranks still
busy ``stall_timeout`` seconds after another returned, ranks silent for ``straggler_timeout``
seconds after another returned (on by default: a rank left in a collective by a peer that returned
would otherwise wait for ever), or the whole launch over ``timeout``.

Pure bookkeeping of times (the supervisor tells it what happened and asks what is due), so it is
tested without processes.

Examples:
    >>> dog = Watchdog(stall_timeout=60, timeout=None, now=0.0)
    >>> dog.activity(10.0); dog.expired(50.0, unfinished=[1]) is None
    True
    >>> dog.expired(70.0, unfinished=[1])[0]
    'stalled'
    >>> dog = Watchdog(stall_timeout=None, timeout=None, now=0.0, straggler_timeout=300)
    >>> dog.result(5.0); dog.activity(100.0); dog.expired(399.0, unfinished=[1]) is None
    True
    >>> dog.expired(400.0, unfinished=[1])[0]
    'stalled'
"""

from __future__ import annotations

__all__ = ["Watchdog"]


class Watchdog:
    def __init__(
        self,
        stall_timeout: float | None,
        timeout: float | None,
        now: float,
        launch_started: float | None = None,
        straggler_timeout: float | None = None,
        hint: str | None = None,
    ) -> None:
        self.stall_timeout = stall_timeout
        self.hint = hint  # the devices' likely cause of a stall (FaultPolicy.stall_hint)
        self.straggler_timeout = straggler_timeout
        self.timeout = timeout
        self.started = now if launch_started is None else launch_started  # ``timeout`` bounds the launch
        self.last_activity = now
        self.first_result: float | None = None

    def activity(self, now: float) -> None:
        """A rank wrote output, logged a metric or changed status."""
        self.last_activity = now

    def result(self, now: float) -> None:
        """A rank returned (its peers should follow soon)."""
        self.last_activity = now
        if self.first_result is None:
            self.first_result = now

    def deadline(self) -> float | None:
        """The next moment something may expire, or None."""
        candidates = []
        if self.timeout is not None:
            candidates.append(self.started + self.timeout)
        if self.stall_timeout is not None:
            candidates.append(self.last_activity + self.stall_timeout)
            if self.first_result is not None:
                candidates.append(self.first_result + self.stall_timeout)
        if self.straggler_timeout is not None and self.first_result is not None:
            candidates.append(self.last_activity + self.straggler_timeout)
        return min(candidates) if candidates else None

    def expired(self, now: float, unfinished: list[int]) -> tuple[str, str] | None:
        """("timeout" | "stalled", why) when the launch must end, else None; a stall's why ends with
        the devices' hint, if any.

        Examples:
            >>> dog = Watchdog(stall_timeout=60, timeout=None, now=0.0, hint="set NCCL_P2P_DISABLE=1")
            >>> dog.expired(60.0, unfinished=[0, 1])[1].endswith("; set NCCL_P2P_DISABLE=1")
            True
        """
        found = self._expired(now, unfinished)
        if found is None or found[0] != "stalled" or not self.hint:
            return found
        return found[0], f"{found[1]}; {self.hint}"

    def _expired(self, now: float, unfinished: list[int]) -> tuple[str, str] | None:
        if not unfinished:
            return None
        names = ", ".join(str(rank) for rank in unfinished)
        ranks = f"rank{'s' if len(unfinished) != 1 else ''} {names}"
        if self.timeout is not None and now >= self.started + self.timeout:
            return "timeout", f"the launch ran past timeout={self.timeout:g} s; {ranks} had not finished"
        if (
            self.straggler_timeout is not None
            and self.first_result is not None
            and now >= self.last_activity + self.straggler_timeout
        ):
            return "stalled", (
                f"{ranks} showed no sign of life for {self.straggler_timeout:g} s after another rank returned"
                f" (straggler_timeout={self.straggler_timeout:g}: a rank left waiting in a collective by a peer"
                " that returned? straggler_timeout=None waits for ever)"
            )
        if self.stall_timeout is None:
            return None
        if self.first_result is not None and now >= self.first_result + self.stall_timeout:
            return "stalled", (
                f"{ranks} had not finished {self.stall_timeout:g} s after another rank returned"
                f" (stall_timeout={self.stall_timeout:g})"
            )
        if now >= self.last_activity + self.stall_timeout:
            return "stalled", (
                f"no rank wrote output, logged a metric or returned for {self.stall_timeout:g} s"
                f" (stall_timeout); {ranks} never finished"
            )
        return None
