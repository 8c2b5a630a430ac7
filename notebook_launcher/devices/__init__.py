"""Devices a launch can run on, each behind the ``Device`` interface, chosen once by ``select_device``.

A device knows how many ranks it can hold, how they start and which ``torch.distributed`` backend
they use, and it finds that out without initializing CUDA in the kernel (the kernel must stay
fork-safe). ``probe`` reads the host; ``inventory`` describes it for the front ends.

Examples:
    >>> select_device("cpu").name, select_device("cpu").backend
    ('cpu', 'gloo')
"""

from __future__ import annotations

from ..choices import DEVICES, check_choice
from .base import Device
from .cpu import CpuDevice
from .cuda import CudaDevice
from .probe import is_tpu_host, torch_tpu_installed
from .tpu import TorchTpuDevice
from .xla import XlaDevice

__all__ = ["Device", "CpuDevice", "CudaDevice", "TorchTpuDevice", "XlaDevice", "select_device"]


def select_device(requested: str = "auto") -> Device:
    """Return the device for ``requested``.

    "auto" is the TPU on a TPU host, else CUDA when a GPU is present, else CPU. "tpu" is
    torch_tpu's chips when torch_tpu is installed, else torch_xla's device; "xla" is always
    torch_xla's (on a CPU host with ``PJRT_DEVICE=CPU``, its CPU device).

    Raises:
        ValueError: an unknown name, or "cuda" when no GPU is found.
    """
    check_choice("device", requested, DEVICES)
    if requested == "tpu" or (requested == "auto" and is_tpu_host()):
        return TorchTpuDevice() if torch_tpu_installed() else XlaDevice()
    if requested == "xla":
        return XlaDevice()
    cuda = CudaDevice()
    if requested == "cuda" and cuda.count() == 0:
        raise ValueError("device='cuda' was asked for, but no CUDA GPU was found (NVML sees none)")
    if requested == "cuda" or (requested == "auto" and cuda.count() > 0):
        return cuda
    return CpuDevice()
