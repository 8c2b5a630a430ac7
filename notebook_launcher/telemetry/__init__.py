"""What the launch measures of each rank by itself, beside what the function logs: the pace the
rank reports (``trainer_core.throughput``), its CPU and memory and its GPU (through NVML) read from the kernel
(``system``, ``gpu``), and which ranks lag behind the others (``stragglers``)."""

from .measures import MEASURES_ENV, AttemptMeasures, measures_on
from .names import (
    BUILT_IN,
    CPU,
    GPU_MEMORY,
    GPU_POWER,
    GPU_THROTTLED,
    GPU_UTIL,
    MFU,
    RSS,
    SAMPLED_BY_KERNEL,
    SAMPLES,
    STEP_TIME,
    STEPS,
    TOKENS,
    WORK_TIME,
    chart_order,
)
from .stragglers import Stragglers
from .system import SystemSampler

__all__ = [
    "AttemptMeasures",
    "MEASURES_ENV",
    "measures_on",
    "BUILT_IN",
    "CPU",
    "RSS",
    "SAMPLED_BY_KERNEL",
    "SAMPLES",
    "STEP_TIME",
    "STEPS",
    "TOKENS",
    "MFU",
    "GPU_UTIL",
    "GPU_MEMORY",
    "GPU_POWER",
    "GPU_THROTTLED",
    "WORK_TIME",
    "Stragglers",
    "SystemSampler",
    "chart_order",
]
