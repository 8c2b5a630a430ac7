"""Devices a launch can run on, each behind one small interface, chosen once by ``select_device``.

A device knows how many ranks it can hold and which ``torch.distributed`` backend its ranks use,
and it finds that out without initializing CUDA in the kernel (the kernel must stay fork-safe).

Example:
    >>> select_device("cpu").name, select_device("cpu").backend
    ('cpu', 'gloo')
"""

from __future__ import annotations

from .cpu import CpuDevice
from .cuda import CudaDevice
from .xla import XlaDevice

__all__ = ["CpuDevice", "CudaDevice", "XlaDevice", "select_device", "DEVICE_CHOICES"]

DEVICE_CHOICES = ("auto", "cpu", "cuda", "xla", "tpu")


def select_device(requested="auto"):
    """Return the device for ``requested``.

    "auto" is XLA on a TPU host, else CUDA when a GPU is present, else CPU. "tpu" and "xla" both
    mean torch_xla's device (on a CPU host with ``PJRT_DEVICE=CPU``, its CPU device).

    Raises:
        ValueError: an unknown name, or "cuda" when no GPU is found.
    """
    from .inventory import is_tpu_host

    if requested not in DEVICE_CHOICES:
        raise ValueError(f"device={requested!r} is not one of {', '.join(map(repr, DEVICE_CHOICES))}")
    if requested in ("xla", "tpu") or (requested == "auto" and is_tpu_host()):
        return XlaDevice()
    cuda = CudaDevice()
    if requested == "cuda" and cuda.count() == 0:
        raise ValueError("device='cuda' was asked for, but no CUDA GPU was found (NVML sees none)")
    if requested == "cuda" or (requested == "auto" and cuda.count() > 0):
        return cuda
    return CpuDevice()
