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

__all__ = ["CpuDevice", "CudaDevice", "select_device", "DEVICE_CHOICES"]

DEVICE_CHOICES = ("auto", "cpu", "cuda")


def select_device(requested="auto"):
    """Return the device for ``requested`` ("auto" = CUDA when a GPU is present, else CPU).

    Raises:
        ValueError: an unknown name, or "cuda" when no GPU is found.
    """
    if requested not in DEVICE_CHOICES:
        raise ValueError(f"device={requested!r} is not one of {', '.join(map(repr, DEVICE_CHOICES))}")
    cuda = CudaDevice()
    if requested == "cuda" and cuda.count() == 0:
        raise ValueError("device='cuda' was asked for, but no CUDA GPU was found (NVML sees none)")
    if requested == "cuda" or (requested == "auto" and cuda.count() > 0):
        return cuda
    return CpuDevice()
