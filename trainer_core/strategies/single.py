"""One process: the model is only moved to its device.

Examples:
    >>> from trainer_core.state import DistributedState
    >>> SingleProcessStrategy(DistributedState.from_environment(use_cpu=True)).name
    'single'
"""

from __future__ import annotations

from .base import BaseStrategy

__all__ = ["SingleProcessStrategy"]


class SingleProcessStrategy(BaseStrategy):
    name = "single"
