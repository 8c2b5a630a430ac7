"""What a rank's Accelerator measures of itself and shows in the notebook view, beside what the
function logs: its pace (``trainer_core.throughput``), the memory a sharded model holds after its
first step, and a GPU's peak memory now and then. ``Accelerator`` inherits these methods.

Examples:
    >>> from trainer_core import Accelerator
    >>> Accelerator(cpu=True).throughput()["steps"]
    0
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch

from ..flops import peak_tflops
from ..memory import held_bytes
from ..metrics import MetricLog
from ..throughput import Throughput

__all__ = ["MeasureMethods", "MEMORY_METRIC", "DEVICE_MEMORY_METRIC"]

MEMORY_METRIC = "held MB (params+optimizer)"  # shown once per rank after the first step of a sharded model
DEVICE_MEMORY_METRIC = "GPU peak MB"  # shown per rank after the first step, then every DEVICE_MEMORY_EVERY s
DEVICE_MEMORY_EVERY = 5.0


class MeasureMethods:
    """The rank's measures: counted at each optimizer step, read by ``throughput`` and ``held_memory``."""

    state: Any
    precision: Any
    strategy: Any
    prepared: Any
    step: int
    _metrics: MetricLog
    _throughput: Throughput
    _memory_shown: bool
    _device_memory_due: float

    def _after_optimizer_step(self) -> None:
        """Count the step in the rank's pace; after the first step of a sharded model, show each
        rank's held memory in the notebook view; on a GPU, each rank's peak device memory too
        (after the first step, then now and then)."""
        self._throughput.stepped()
        self._show_device_memory()
        if self._memory_shown or not self.strategy.shards_state:
            return
        self._memory_shown = True
        held = self.held_memory()
        self._metrics.show({MEMORY_METRIC: (held["parameters"] + held["optimizer"]) / 2**20}, self.step)

    def _show_device_memory(self) -> None:
        now = time.monotonic()
        if now < self._device_memory_due:
            return
        peak = self.state.backend.peak_memory()
        self._device_memory_due = now + DEVICE_MEMORY_EVERY if peak is not None else math.inf
        if peak is not None:
            self._metrics.show({DEVICE_MEMORY_METRIC: peak / 2**20}, self.step)

    def _peak_tflops(self) -> float | None:
        """The dense peak of this rank's device at the training precision (``trainer_core.flops``)."""
        device = self.state.device
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else None
        return peak_tflops(name, self.precision.name)

    def throughput(self) -> dict[str, Any]:
        """This rank's pace, as the notebook view charts it: over the last second or so,
        ``step_time`` (seconds per optimizer step), ``work_time`` (the step time less the time in
        ``backward()`` and the optimizer's step, where synchronised ranks wait),
        ``steps_per_second``, ``samples_per_second`` (the training loader's batches) and
        ``tokens_per_second`` (None unless batches carry token ids), ``mfu`` (the share of the
        device's dense peak, 0 to 1, where the peak is known: ``trainer_core.flops``), and the
        totals ``steps``, ``samples`` and ``tokens``, and ``flops_per_step`` (counted in the first
        step where a peak is known). None where nothing was measured yet.

        Examples:
            >>> from trainer_core import Accelerator
            >>> accelerator = Accelerator(cpu=True)
            >>> accelerator.throughput()["steps"], accelerator.throughput()["step_time"]
            (0, None)
        """
        return self._throughput.figures()

    def held_memory(self) -> dict[str, int]:
        """Bytes this rank holds of the prepared models' parameters, gradients and optimizer state
        (``trainer_core.memory``): what sharding saves, measured.

        Examples:
            >>> import torch
            >>> from trainer_core import Accelerator
            >>> accelerator = Accelerator(cpu=True)
            >>> model = accelerator.prepare(torch.nn.Linear(10, 10))
            >>> accelerator.held_memory()
            {'parameters': 440, 'gradients': 0, 'optimizer': 0}
        """
        return held_bytes(self.prepared.models, self.prepared.optimizers)
