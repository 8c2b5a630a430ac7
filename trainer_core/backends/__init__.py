"""Where a rank computes, behind one small interface chosen once by ``select_backend``.

A backend names the ``torch.device`` of a local rank, the ``torch.distributed`` backend, how DDP is
told about the device, and how memory is released. CPU (gloo), CUDA (NCCL) and torch_tpu's chips
("tpu") live here; XLA joins the same interface.

Examples:
    >>> select_backend(use_cpu=True).dist_backend
    'gloo'
"""

from __future__ import annotations

from .cpu import CpuBackend
from .cuda import CudaBackend
from .tpu import TpuBackend

__all__ = ["select_backend", "CpuBackend", "CudaBackend", "TpuBackend"]


def select_backend(use_cpu=False, device_hint=None):
    """XLA or torch_tpu's chips when the launcher says so; else CUDA when a GPU is visible and
    neither ``use_cpu`` nor the launcher's device says CPU; else CPU."""
    if device_hint == "xla" and not use_cpu:
        from .xla import XlaBackend

        return XlaBackend()
    if device_hint == "tpu" and not use_cpu:
        return TpuBackend()
    if use_cpu or device_hint == "cpu":
        return CpuBackend()
    if device_hint == "cuda" or CudaBackend.available():
        return CudaBackend()
    return CpuBackend()
