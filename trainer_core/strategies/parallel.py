"""The base of the strategies whose ranks train one model together (DDP, FSDP2, DeepSpeed ZeRO,
XLA): each says how the model is wrapped or sharded, how gradients are synced and what a rank
saves; what they do not say is ``BaseStrategy``'s.

Examples:
    >>> from trainer_core.strategies.ddp import DDPStrategy
    >>> issubclass(DDPStrategy, ParallelStrategy)
    True
"""

from __future__ import annotations

from typing import Any

from .base import BaseStrategy

__all__ = ["ParallelStrategy"]


class ParallelStrategy(BaseStrategy):
    """Several ranks, one model."""

    name = "parallel"

    @classmethod
    def for_plugin(cls, state: Any, plugin: Any, mesh: Any = None) -> ParallelStrategy:
        """The strategy a sharding plugin asks for (``register_sharding``), on ``state``'s ranks and
        over ``mesh`` when the ranks form one; a strategy that shards with a plugin defines it."""
        raise TypeError(f"{cls.__name__} is not made from a sharding plugin")
