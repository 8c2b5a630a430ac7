"""One attempt's built-in measures, kept in the launch's record: the ranks' CPU and memory, and their
GPUs' (through NVML), sampled from the kernel when due, and the stragglers among the work times the
ranks report.

``NOTEBOOK_LAUNCHER_MEASURES=off`` turns both sides off (this one and the rank's pace meter,
which reads the same variable); what the function logs is kept either way.

Examples:
    >>> from notebook_launcher.launching.record import LaunchRecord
    >>> record = LaunchRecord(2)
    >>> measures = AttemptMeasures(record)
    >>> for _ in range(3):
    ...     for rank, ms in ((0, 100.0), (1, 300.0)):
    ...         measures.reported(rank, {WORK_TIME: ms})
    >>> record.stragglers
    {1: 'work time 300 ms, 3.0× the median of the other ranks (100 ms)'}
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..choices import switched_on
from .gpu import GpuSampler
from .names import STEP_TIME, WORK_TIME
from .stragglers import Stragglers
from .system import SystemSampler

if TYPE_CHECKING:
    from ..launching.record import LaunchRecord

__all__ = ["AttemptMeasures", "MEASURES_ENV", "measures_on"]

MEASURES_ENV = "NOTEBOOK_LAUNCHER_MEASURES"


def measures_on(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the built-in measures are on (they are unless ``NOTEBOOK_LAUNCHER_MEASURES`` is off)."""
    return switched_on(MEASURES_ENV, environ)


class AttemptMeasures:
    """What the supervisor asks: ``due()``, ``sample(pids)`` and ``reported(rank, values)``."""

    def __init__(self, record: LaunchRecord, on: bool | None = None) -> None:
        self._record = record
        self._on = measures_on() if on is None else on
        self._system = SystemSampler()
        self._gpus = GpuSampler()
        self._stragglers = Stragglers()

    def due(self) -> float | None:
        """When (``time.monotonic()``) the ranks' processes are next sampled; None when off."""
        return self._system.due() if self._on else None

    def sample(self, pids: Mapping[int, int]) -> list[tuple[int, dict[str, float]]]:
        """Sample the ranks' processes (``pids``: rank → pid) into the record; (rank, values) of each."""
        if not self._on:
            return []
        now = time.time()
        seconds = round(now - self._record.started_at, 1)
        samples = self._system.sample(pids)
        for rank, values in self._gpus.sample(pids).items():
            samples.setdefault(rank, {}).update(values)
        for rank, values in samples.items():
            self._record.add_metric(rank, {"step": seconds, "values": values, "x": "seconds"}, now)
        return list(samples.items())

    def reported(self, rank: int, values: Mapping[str, float]) -> None:
        """A rank sent metrics: its work time (else its step time) goes to the straggler watch."""
        own = values.get(WORK_TIME, values.get(STEP_TIME))
        if own is not None:
            self._stragglers.report(rank, own)
            self._record.stragglers = dict(self._stragglers.flagged)
