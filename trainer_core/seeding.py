"""``set_seed`` for reproducible runs (checkpoints keep every rank's RNG states: ``checkpoint``)."""

from __future__ import annotations

import random
import sys

import torch

__all__ = ["set_seed"]


def set_seed(seed: int, device_specific: bool = False) -> None:
    """Seed Python, NumPy (if imported) and torch (CPU and CUDA) with ``seed``.

    Args:
        seed: the seed.
        device_specific: add the process index, so every rank draws different numbers.

    Examples:
        >>> set_seed(42); a = torch.rand(1); set_seed(42); bool(a == torch.rand(1))
        True
    """
    import os

    if device_specific:
        seed += int(os.environ.get("RANK", 0))
    random.seed(seed)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed(seed % 2**32)
    torch.manual_seed(seed)
