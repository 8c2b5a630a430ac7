"""The base of the strategies whose ranks train one model together (DDP, FSDP2, DeepSpeed ZeRO,
XLA): each says how the model is wrapped or sharded, how gradients are synced and what a rank
saves; what they do not say is ``BaseStrategy``'s.

Examples:
    >>> from trainer_core.strategies.ddp import DDPStrategy
    >>> issubclass(DDPStrategy, ParallelStrategy)
    True
"""

from __future__ import annotations

from .base import BaseStrategy

__all__ = ["ParallelStrategy"]


class ParallelStrategy(BaseStrategy):
    """Several ranks, one model."""

    name = "parallel"
