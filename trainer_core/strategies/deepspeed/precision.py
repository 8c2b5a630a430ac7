"""The mixed precision of a DeepSpeed engine, which casts the weights and scales the loss itself."""

from __future__ import annotations

from typing import Any

from ...precision import FullPrecision

__all__ = ["EnginePrecision"]


class EnginePrecision(FullPrecision):
    """The precision of an engine that casts weights and scales the loss itself (DeepSpeed): the
    forward keeps ``precision``'s autocast (inputs meet the engine's half-precision weights); the
    loss and the step go through unchanged, and a step the engine skipped reads as skipped.

    Examples:
        >>> from trainer_core.backends import CpuBackend
        >>> import torch
        >>> from trainer_core.precision import select_precision
        >>> p = EnginePrecision(select_precision("bf16", CpuBackend()))
        >>> p.name, p.scaler, p.scale_loss(torch.ones(1)).item()
        ('bf16', None, 1.0)
    """

    def __init__(self, precision: FullPrecision) -> None:
        super().__init__()
        self.name = precision.name
        self._inner = precision

    def autocast(self, **options: Any) -> Any:
        return self._inner.autocast(**options)

    def step(self, optimizer: Any, closure: Any = None) -> tuple[Any, bool]:
        return optimizer.step(closure), bool(getattr(optimizer, "overflow", False))
