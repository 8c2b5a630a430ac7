"""XLA ranks: the model is moved to the XLA device, and the backend's optimizer step all-reduces the
gradients (``xm.optimizer_step``), so nothing wraps the model and there is no sync to skip."""

from __future__ import annotations

from .parallel import ParallelStrategy

__all__ = ["XlaStrategy"]


class XlaStrategy(ParallelStrategy):
    name = "xla"
