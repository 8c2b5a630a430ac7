"""The shuffle of a prepared loader's plain ``RandomSampler``, drawn as Accelerate draws it.

The same script with the same seed must train the same model under trainer_core as under Hugging
Face Accelerate, so the order and the random numbers consumed match Accelerate's
(``accelerate.data_loader.prepare_data_loader``):

- several processes: at ``prepare`` the sampler gets a generator seeded by one int64 drawn from the
  global torch RNG (rank 0's draw, so every rank shuffles alike), kept across epochs;
- one process: the sampler is left alone, so every epoch draws a fresh seed from the global RNG.

Either way the generator's state at the start of the current epoch goes into the loader's
``state_dict``: a resumed run redraws the same epoch order (Accelerate cannot; its resumed epoch
is shuffled anew), and the global RNG stream is the uninterrupted run's.

``DataLoaderConfiguration(data_seed=...)`` or ``use_seedable_sampler=True`` choose the seeded order
instead (``seed + epoch``, Accelerate's ``SeedableRandomSampler``; see ``data.py``).

Examples:
    >>> import torch
    >>> from torch.utils.data import RandomSampler
    >>> sampler = RandomSampler(range(4))
    >>> shuffle = SamplerShuffle(sampler, seed=None)   # one process
    >>> _ = torch.manual_seed(0); shuffle.before_order(); first = list(sampler)
    >>> _ = torch.manual_seed(0); list(RandomSampler(range(4))) == first   # what the sampler alone draws
    True
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import RandomSampler

from ..data import map_batch_sampler

__all__ = ["SamplerShuffle", "draw_seed", "plain_random_sampler"]


def plain_random_sampler(loader: Any) -> RandomSampler | None:
    """The map-style loader's ``RandomSampler`` when it has no generator of its own (it would draw
    its order from the global RNG): the sampler a ``SamplerShuffle`` takes over; else None."""
    batch_sampler = map_batch_sampler(loader)
    sampler = None if batch_sampler is None else batch_sampler.sampler
    if type(sampler) is not RandomSampler or sampler.generator is not None:
        return None
    return sampler


def draw_seed() -> int:
    """One int64 from the global torch RNG, drawn as ``RandomSampler`` and Accelerate draw it."""
    return int(torch.empty((), dtype=torch.int64).random_().item())


class SamplerShuffle:
    """Owns ``sampler.generator``: ``seed`` (the processes' common draw at prepare) keeps one
    generator for every epoch; None draws a new seed at every epoch start, as the sampler would."""

    def __init__(self, sampler: Any, seed: int | None) -> None:
        self.sampler = sampler
        self.persistent = seed is not None
        self._started: torch.Tensor | None = None  # the generator state this epoch started from
        self._restore: torch.Tensor | None = None
        if seed is not None:
            sampler.generator = torch.Generator().manual_seed(seed)

    def before_order(self) -> None:
        """Just before the epoch's order is drawn (after the loader's iterator drew its base seed,
        as in a plain DataLoader: the draws come in the same order)."""
        if self._restore is not None:
            if self.sampler.generator is None:
                self.sampler.generator = torch.Generator()
            self.sampler.generator.set_state(self._restore)
            self._restore = None
        elif not self.persistent:
            self.sampler.generator = torch.Generator().manual_seed(draw_seed())
        self._started = self.sampler.generator.get_state()

    def end_epoch(self) -> None:
        """After the epoch's last batch."""
        self._started = None

    def state_dict(self) -> torch.Tensor | None:
        """The state the current epoch's order came from (between epochs: the next one's, or None
        when the next epoch draws a fresh seed)."""
        if self._started is not None:
            return self._started
        return self.sampler.generator.get_state() if self.persistent else None

    def load_state_dict(self, state: torch.Tensor | None) -> None:
        """The next epoch starts its order from ``state``."""
        self._restore = state
