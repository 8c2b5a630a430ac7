"""Each rank's pace, measured without user code: step time, steps/s, samples/s and tokens/s.

A step is an optimizer step the prepared optimizer took (with gradient accumulation, one step
spans several batches). Its work time is the step time less the time in ``backward()`` and the
optimizer's step, where the ranks of a synchronised model wait for each other: the part of a step
that is the rank's own, which the straggler check compares (the step times of synchronised ranks
are alike). Where a device runs its work asynchronously (CUDA), the host-side times are only where
the host waited, so a GPU straggler shows in work time only when its host side is the slow part.

Samples are the leading dimension of the batches the prepared loader that drives training (the
outermost one running) yields; tokens are counted where a batch carries token
ids: a mapping's ``input_ids``, else an integer tensor of two or more dimensions. Where the
device's peak is known (``trainer_core.flops``), the FLOPs of the first step are counted and each
report also gives ``MFU %``. Every
``REPORT_EVERY`` seconds (less often as the run ages: a thousandth of its age apart, so a day-long
run sends a few thousand reports, not 86,400) the figures of the time since the last report go to
the notebook view (``MetricLog.show``), where each rank's charts and the straggler check read them;
nothing is sent more often, and nothing synchronises a device (only shapes are read).

Examples:
    >>> import torch
    >>> shown = []
    >>> ticks = iter([0.0, 0.5, 1.0])
    >>> meter = Throughput(lambda values, step: shown.append((step, values)), clock=lambda: next(ticks))
    >>> for _ in range(2):
    ...     meter.batch({"input_ids": torch.zeros(8, 128, dtype=torch.long)})
    ...     meter.stepped()
    >>> shown[-1][0], shown[-1][1][STEP_TIME], shown[-1][1][WORK_TIME], shown[-1][1][SAMPLES], shown[-1][1][TOKENS]
    (2, 500.0, 500.0, 16.0, 2048.0)
    >>> meter.figures()["steps"], meter.figures()["samples_per_second"]
    (2, 16.0)
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch

from .flops import ForwardFlops

__all__ = [
    "Throughput",
    "batch_counts",
    "shown_pace",
    "STEP_TIME",
    "WORK_TIME",
    "STEPS",
    "SAMPLES",
    "TOKENS",
    "MFU",
    "REPORT_EVERY",
]

SHOW_ENV = "NOTEBOOK_LAUNCHER_MEASURES"  # "off": the pace is measured, not shown (the launcher's switch)

REPORT_EVERY = 1.0  # seconds between two reports of a rank's pace to the notebook view
STEP_TIME = "step time ms"
WORK_TIME = "work time ms"
STEPS = "steps/s"
SAMPLES = "samples/s"
TOKENS = "tokens/s"
MFU = "MFU %"  # of the device's dense peak, where it is known


def shown_pace(show: Callable[[dict, int], None]) -> Callable[[dict, int], None]:
    """``show``, or a sink when the launch's built-in measures are off (``NOTEBOOK_LAUNCHER_MEASURES=off``)."""
    if os.environ.get(SHOW_ENV, "on").strip().lower() in ("off", "0", "no", "false"):
        return lambda values, step: None
    return show


def batch_counts(batch: Any) -> tuple[int, int | None]:
    """(samples, tokens or None) in one batch, read from shapes only.

    Examples:
        >>> import torch
        >>> batch_counts((torch.zeros(4, 3), torch.zeros(4)))
        (4, None)
        >>> batch_counts({"input_ids": torch.zeros(2, 16, dtype=torch.long), "labels": torch.zeros(2)})
        (2, 32)
    """
    tensors = _tensors(batch)
    if not tensors:
        return 0, None
    samples = tensors[0].shape[0] if tensors[0].dim() else 1
    if isinstance(batch, Mapping) and torch.is_tensor(batch.get("input_ids")):
        return samples, batch["input_ids"].numel()
    ids = next((t for t in tensors if t.dim() >= 2 and not t.is_floating_point() and not t.is_complex()), None)
    return samples, None if ids is None else ids.numel()


def _tensors(batch: Any, found: list | None = None) -> list:
    found = [] if found is None else found
    if torch.is_tensor(batch):
        found.append(batch)
    elif isinstance(batch, Mapping):
        for value in batch.values():
            _tensors(value, found)
    elif isinstance(batch, (list, tuple)):
        for value in batch:
            _tensors(value, found)
    return found


class Throughput:
    """Counts batches and optimizer steps; shows the pace every ``every`` seconds through ``show``."""

    def __init__(
        self,
        show: Callable[[dict, int], None],
        clock: Callable[[], float] = time.perf_counter,
        every: float = REPORT_EVERY,
        peak_tflops: float | None = None,
    ) -> None:
        self._show = show
        self._peak = peak_tflops
        self.flops = ForwardFlops() if peak_tflops else None  # counts the first step's FLOPs
        self.flops_per_step: int | None = None
        self._clock = clock
        self._every = every
        self.steps = 0
        self.samples = 0
        self.tokens = 0
        self._counting_tokens = False
        self._first: float | None = None  # when the first window opened
        self._window: tuple[float, int, int, int] | None = None  # (since, steps, samples, tokens) at its start
        self._synced = 0.0  # seconds of the window spent where ranks wait for each other
        self._latest: dict[str, float] = {}

    @contextlib.contextmanager
    def syncing(self) -> Iterator[None]:
        """Around ``backward()`` and the optimizer's step: time there is not the rank's own work."""
        start = self._clock()
        try:
            yield
        finally:
            self._synced += self._clock() - start

    def batch(self, batch: Any) -> None:
        """The training loader yielded ``batch``."""
        samples, tokens = batch_counts(batch)
        self.samples += samples
        if tokens is not None:
            self.tokens += tokens
            self._counting_tokens = True
        if self._window is None:
            self._open(self._clock(), self.samples - samples, self.tokens - (tokens or 0))

    def watch(self, model: torch.nn.Module) -> None:
        """Count the FLOPs of ``model``'s forward passes in the first step (where a peak is known)."""
        if self.flops is not None and self.steps == 0:
            self.flops.attach(model)

    def stepped(self) -> None:
        """The prepared optimizer took a step."""
        self.steps += 1
        if self.flops is not None and self.flops.attached:
            self.flops_per_step = self.flops.stop()
        now = self._clock()
        if self._window is None:
            self._open(now, self.samples, self.tokens)
            return
        since, steps, samples, tokens = self._window
        assert self._first is not None  # set with the first window
        if now - since < max(self._every, (now - self._first) / 1000.0) or self.steps == steps:
            return
        seconds = max(now - since, 1e-9)
        figures = {
            STEP_TIME: 1000.0 * seconds / (self.steps - steps),
            WORK_TIME: 1000.0 * max(0.0, seconds - self._synced) / (self.steps - steps),
            STEPS: (self.steps - steps) / seconds,
            SAMPLES: (self.samples - samples) / seconds,
        }
        if self._counting_tokens:
            figures[TOKENS] = (self.tokens - tokens) / seconds
        if self.flops_per_step and self._peak:
            figures[MFU] = 100.0 * self.flops_per_step * figures[STEPS] / (self._peak * 1e12)
        self._latest = figures
        self._open(now, self.samples, self.tokens)
        self._show(figures, self.steps)

    def _open(self, now: float, samples: int, tokens: int) -> None:
        """A window starts at ``now``, with the counts it starts from."""
        self._first = now if self._first is None else self._first
        self._window = (now, self.steps, samples, tokens)
        self._synced = 0.0

    def figures(self) -> dict[str, Any]:
        """The pace over the last reported window, and the totals so far (see ``Accelerator.throughput``)."""
        latest = self._latest
        return {
            "step_time": latest[STEP_TIME] / 1000.0 if latest else None,
            "work_time": latest[WORK_TIME] / 1000.0 if latest else None,
            "steps_per_second": latest.get(STEPS),
            "samples_per_second": latest.get(SAMPLES),
            "tokens_per_second": latest.get(TOKENS),
            "steps": self.steps,
            "samples": self.samples,
            "tokens": self.tokens if self._counting_tokens else None,
            "flops_per_step": self.flops_per_step,
            "mfu": latest[MFU] / 100.0 if MFU in latest else None,
        }
