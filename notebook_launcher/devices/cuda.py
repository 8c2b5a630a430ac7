"""CUDA ranks: NCCL collectives, one rank per GPU.

The GPU count comes from NVML (``PYTORCH_NVML_BASED_CUDA_CHECK=1``, set when the package is
imported), which never creates a CUDA context in the kernel.
"""

from __future__ import annotations

import sys


def nvml_gpu_count():
    """Count visible CUDA GPUs without initializing CUDA; 0 on a CPU-only build or host."""
    torch = sys.modules.get("torch")
    if torch is None:
        import torch
    if not torch.version.cuda:
        return 0
    return torch.cuda.device_count()


class CudaDevice:
    """Ranks on CUDA GPUs; ``num_processes=None`` means one rank per GPU."""

    name = "cuda"
    backend = "nccl"

    def __init__(self):
        self._count = None

    def count(self):
        if self._count is None:
            self._count = nvml_gpu_count()
        return self._count

    def default_processes(self):
        return self.count()

    def process_rule(self, num_processes):
        return None

    def describe(self):
        n = self.count()
        return f"{n} CUDA GPU{'s' if n != 1 else ''}"
