"""The names the built-in measures are charted under, and the order of the charts.

The pace names are the ones ``trainer_core.throughput`` sends from a rank (the two packages do not
import each other). A person's own metrics come first, then the pace, then the system.

Examples:
    >>> sorted(["RSS MB", "loss", "step time ms", "accuracy"], key=chart_order)
    ['accuracy', 'loss', 'step time ms', 'RSS MB']
"""

from __future__ import annotations

__all__ = [
    "STEP_TIME",
    "WORK_TIME",
    "STEPS",
    "SAMPLES",
    "TOKENS",
    "MFU",
    "CPU",
    "RSS",
    "GPU_UTIL",
    "GPU_MEMORY",
    "GPU_POWER",
    "GPU_THROTTLED",
    "BUILT_IN",
    "SAMPLED_BY_KERNEL",
    "chart_order",
]

STEP_TIME = "step time ms"
WORK_TIME = "work time ms"  # the step time less backward() and the optimizer's step, where ranks wait
STEPS = "steps/s"
SAMPLES = "samples/s"
TOKENS = "tokens/s"
MFU = "MFU %"  # of the device's dense peak (trainer_core.flops), where it is known
CPU = "CPU %"  # of the rank's process and its children (DataLoader workers), from the kernel
RSS = "RSS MB"  # resident memory of the rank's process, from the kernel
GPU_UTIL = "GPU %"  # of the rank's GPU, read through NVML by the kernel (telemetry/gpu.py)
GPU_MEMORY = "GPU memory MB"  # in use on the rank's GPU
GPU_POWER = "GPU power W"
GPU_THROTTLED = "GPU throttled"  # 1 while its clocks are held down (heat, power cap), else 0

# new values of these say nothing of what the ranks did
SAMPLED_BY_KERNEL = (CPU, RSS, GPU_UTIL, GPU_MEMORY, GPU_POWER, GPU_THROTTLED)

BUILT_IN = (STEP_TIME, WORK_TIME, STEPS, SAMPLES, TOKENS, MFU, GPU_UTIL, GPU_MEMORY, GPU_POWER, GPU_THROTTLED, CPU, RSS)


def chart_order(key: str) -> tuple[int, str]:
    """Sort key of a metric's chart: the function's own metrics by name, then the built-in ones."""
    return (1 + BUILT_IN.index(key), key) if key in BUILT_IN else (0, key)
