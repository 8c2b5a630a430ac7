"""Seeds and RNG states: ``set_seed`` for reproducible runs, capture/restore for checkpoints."""

from __future__ import annotations

import random
import sys

import torch

__all__ = ["set_seed", "rng_states", "restore_rng_states"]


def set_seed(seed, device_specific=False):
    """Seed Python, NumPy (if imported) and torch (CPU and CUDA) with ``seed``.

    Args:
        device_specific: add the process index, so every rank draws different numbers.

    Example:
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


def rng_states():
    """This process's RNG states (Python, NumPy if imported, torch CPU and CUDA if initialized)."""
    states = {"python": random.getstate(), "torch": torch.get_rng_state()}
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        states["numpy"] = numpy.random.get_state()
    if torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def restore_rng_states(states):
    random.setstate(states["python"])
    torch.set_rng_state(states["torch"])
    if "numpy" in states:
        import numpy

        numpy.random.set_state(states["numpy"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
