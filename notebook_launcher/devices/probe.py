"""The host's facts (CPUs, CUDA GPUs, TPU chips, the XLA platform), read without starting anything.

They are trainer_core's (``trainer_core.hardware``): the launcher, the sidebar's inventory and the
training library ask the same questions the same way, and trainer_core imports nothing of the
launcher.
"""

from trainer_core.hardware import (
    cuda_capabilities,
    cuda_driver_started,
    cuda_gpus,
    is_tpu_host,
    nvml_gpu_count,
    parse_capabilities,
    parse_nvidia_smi,
    torch_tpu_installed,
    tpu_chips,
    tpu_cores,
    usable_cpus,
    xla_device_count,
    xla_platform,
)

__all__ = [
    "cuda_capabilities",
    "cuda_driver_started",
    "cuda_gpus",
    "is_tpu_host",
    "nvml_gpu_count",
    "parse_capabilities",
    "parse_nvidia_smi",
    "torch_tpu_installed",
    "tpu_chips",
    "tpu_cores",
    "usable_cpus",
    "xla_device_count",
    "xla_platform",
]
