"""What this kernel can run on, as the front ends show it: CPUs, CUDA GPUs (name, memory), TPU cores.

Found without initializing CUDA or the XLA runtime (the kernel must stay fork-safe): GPU names and
memory from ``nvidia-smi``, the count that launches use from NVML, TPU cores from the host (``probe``).

Examples:
    >>> inventory = device_inventory()
    >>> inventory["cpu"]["count"] >= 1 and inventory["device"] in ("cpu", "cuda", "xla")
    True
"""

from __future__ import annotations

from . import select_device
from .probe import cuda_gpus, tpu_cores, usable_cpus

__all__ = ["device_inventory"]


def device_inventory() -> dict:
    """Everything the sidebar shows, as builtins (sent over the comm)."""
    device = select_device("auto")
    cores, tpu_type = tpu_cores()
    return {
        "cpu": {"count": usable_cpus()},
        "cuda": cuda_gpus(),
        "tpu": {"cores": cores, "type": tpu_type},
        "device": device.name,
        "max_processes": device.count(),
        "default_processes": device.default_processes(),
    }
