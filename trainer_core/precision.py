"""Mixed precision as small objects chosen once by ``select_precision``: "no", "bf16", "fp16".

Each gives an ``autocast()`` context and, for fp16, a gradient scaler; nothing else in the
Accelerator branches on the precision.

Example:
    >>> from trainer_core.backends import CpuBackend
    >>> p = select_precision("bf16", CpuBackend())
    >>> with p.autocast():
    ...     (torch.ones(2, 2) @ torch.ones(2, 2)).dtype
    torch.bfloat16
"""

from __future__ import annotations

import contextlib

import torch

__all__ = ["select_precision", "PRECISIONS"]

PRECISIONS = ("no", "fp16", "bf16")


class FullPrecision:
    name = "no"
    scaler = None

    def autocast(self):
        return contextlib.nullcontext()


class Bf16Precision:
    name = "bf16"
    scaler = None

    def __init__(self, backend):
        self._device = backend.autocast_device

    def autocast(self):
        return torch.autocast(self._device, dtype=torch.bfloat16)


class Fp16Precision:
    """fp16 autocast with a gradient scaler, so small gradients do not underflow."""

    name = "fp16"

    def __init__(self, backend):
        self._device = backend.autocast_device
        self.scaler = backend.grad_scaler()

    def autocast(self):
        return torch.autocast(self._device, dtype=torch.float16)


def select_precision(name, backend):
    """The precision object for ``name``; ``ValueError`` lists the valid names."""
    if name not in PRECISIONS:
        raise ValueError(f"mixed_precision={name!r} is not valid; use one of {', '.join(map(repr, PRECISIONS))}")
    if name == "bf16":
        return Bf16Precision(backend)
    if name == "fp16":
        return Fp16Precision(backend)
    return FullPrecision()
