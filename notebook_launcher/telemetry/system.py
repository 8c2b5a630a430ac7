"""Each rank's CPU and memory, read from the kernel with psutil: nothing runs in the rank for it,
so a rank stuck in C code, or one that never imports trainer_core, is measured all the same.

CPU % is the rank's process with its children (DataLoader workers, a compile's workers), as
``top`` counts it (100 is one core busy); RSS MB is the rank's own resident memory. A sample is
taken every ``SAMPLE_EVERY`` seconds, and less often as the launch ages (a thousandth of its age
apart), so a day-long launch, or persistent workers, keep a few thousand samples a rank, not a
hundred thousand; a process's first sample only starts its CPU count. A rank's children are listed
every ``FAMILY_EVERY`` samples (a listing reads every process of the machine).

Examples:
    >>> import os, time
    >>> ticks = iter(range(100))
    >>> sampler = SystemSampler(clock=lambda: float(next(ticks)), every=1.0)
    >>> sampler.sample({0: os.getpid()})
    {}
    >>> sorted(sampler.sample({0: os.getpid()})[0])
    ['CPU %', 'RSS MB']
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

import psutil

from .names import CPU, RSS

__all__ = ["SystemSampler", "SAMPLE_EVERY", "SPREAD"]

SAMPLE_EVERY = 1.0  # seconds between two samples of the ranks' processes, at least
SPREAD = 1000.0  # ... and at least the launch's age over this
FAMILY_EVERY = 10  # samples between two listings of a rank's children (new DataLoader workers)

_GONE = (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess)


class SystemSampler:
    """``sample(pids)`` when ``due()`` has passed: {rank: {"CPU %": ..., "RSS MB": ...}}."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, every: float = SAMPLE_EVERY) -> None:
        self._clock = clock
        self._every = every
        self._started = self._due = clock()
        self._processes: dict[int, psutil.Process] = {}  # pid → its Process, whose CPU count goes on
        self._families: dict[int, list[psutil.Process]] = {}  # a rank's pid → its descendants, as last listed
        self._samples = 0

    def due(self) -> float:
        """When the next sample is due (the clock's time)."""
        return self._due

    def sample(self, pids: Mapping[int, int]) -> dict[int, dict[str, float]]:
        """The ranks' figures now (``pids``: rank → its process); a rank seen for the first time,
        or whose process is gone, has none."""
        now = self._clock()
        self._due = now + max(self._every, (now - self._started) / SPREAD)
        samples: dict[int, dict[str, float]] = {}
        seen: dict[int, psutil.Process] = {}
        if self._samples % FAMILY_EVERY == 0:  # listing a process's children reads every process's parent
            self._families = {}
        self._samples += 1
        for rank, pid in pids.items():
            try:
                figures = self._read(pid, seen)
            except _GONE:
                continue
            if figures is not None:
                samples[rank] = figures
        self._processes = seen
        return samples

    def _read(self, pid: int, seen: dict[int, psutil.Process]) -> dict[str, float] | None:
        known = self._known(pid, seen)
        main = seen[pid] = known or psutil.Process(pid)
        cpu = main.cpu_percent(None)
        rss = main.memory_info().rss / 2**20
        if pid not in self._families:
            self._families[pid] = main.children(recursive=True)
        for child in self._families[pid]:
            try:
                process = seen[child.pid] = self._known(child.pid, seen) or child
                cpu += process.cpu_percent(None)
            except _GONE:
                continue
        return None if known is None else {CPU: round(cpu, 1), RSS: round(rss, 1)}

    def _known(self, pid: int, seen: dict[int, psutil.Process]) -> psutil.Process | None:
        return seen.get(pid) or self._processes.get(pid)
