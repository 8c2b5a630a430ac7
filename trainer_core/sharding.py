"""This rank's batches of a map-style dataset's epoch: ``ShardedBatchSampler`` (see ``data``).

Every rank draws the same epoch order and takes its slice of each global step of
``num_processes × batch_size`` indices; a short last step is completed from the epoch's first
indices ("even batches"), or, without even batches, batch k goes to rank k mod world. The order is
drawn as the loader asks for it, as Accelerate's ``BatchSamplerShard`` draws it, so a sampler's
generator stands where Accelerate's stands, also after an epoch left with ``break``.

Examples:
    >>> sampler = ShardedBatchSampler(10, 4, drop_last=False, shuffle=False, seed=0, rank=1, world=2)
    >>> list(sampler), len(sampler), sampler.remainder
    ([[4, 5, 6, 7], [2, 3, 4, 5]], 2, 2)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch.utils.data import BatchSampler

__all__ = ["ShardedBatchSampler"]


class ShardedBatchSampler:
    """This rank's batches of indices for one epoch (see the module docstring)."""

    def __init__(
        self,
        dataset_size: int,
        batch_size: int,
        drop_last: bool,
        shuffle: bool,
        seed: int,
        rank: int,
        world: int,
        source: Iterable[Any] | None = None,
        before_order: Callable[[], None] | None = None,
    ) -> None:
        self.source = source  # the user's sampler, kept: its order is every rank's order (same seeds)
        self.before_order = before_order  # called just before ``source`` is iterated for an epoch
        self.even_batches = True  # False: no padding; ranks may get fewer or shorter batches
        self.dataset_size = dataset_size
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.shuffle = shuffle
        self.seed = seed
        self.rank = rank
        self.world = world
        self.epoch = 0
        self.start = 0  # the step the next epoch starts at (resuming mid-epoch); back to 0 after it

    @property
    def global_batch(self) -> int:
        return self.batch_size * self.world

    def __len__(self) -> int:
        if not self.even_batches:
            batches = self._local_batches()
            return max(0, (batches - self.rank + self.world - 1) // self.world)
        if self.drop_last:
            return self.dataset_size // self.global_batch
        return math.ceil(self.dataset_size / self.global_batch)

    def _local_batches(self) -> int:
        """Batches of the loader's own size in one epoch (uneven sharding deals them out)."""
        if self.drop_last:
            return self.dataset_size // self.batch_size
        return math.ceil(self.dataset_size / self.batch_size)

    @property
    def remainder(self) -> int | None:
        """Real samples in the last global step (None without even batches: nothing is padding)."""
        if not self.even_batches:
            return None
        if self.drop_last or len(self) == 0:
            return self.global_batch
        return self.dataset_size - (len(self) - 1) * self.global_batch

    def epoch_order(self) -> Iterator[int]:
        """The epoch's indices as an iterator, drawn as the loader asks for them: from the user's
        sampler lazily, as Accelerate's ``BatchSamplerShard`` draws them (an epoch left early with
        ``break`` leaves the sampler's generator where Accelerate leaves it, so the next epoch's
        order is the same), else the seeded or the sequential order."""
        if self.source is not None:
            if self.before_order is not None:
                self.before_order()
            return (int(index) for index in self.source)
        if not self.shuffle:
            return iter(range(self.dataset_size))
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        return iter(torch.randperm(self.dataset_size, generator=generator).tolist())

    def __iter__(self) -> Iterator[list[int]]:
        order = self.epoch_order()
        first, self.start = self.start, 0
        yield from (self._even(order, first) if self.even_batches else self._dealt(order, first))

    def _even(self, order: Iterator[int], first: int) -> Iterator[list[int]]:
        """Each step takes ``global_batch`` indices, this rank its slice; a short last step is
        completed from the epoch's first indices (over again when the dataset is smaller)."""
        size, made = self.global_batch, 0
        opening: list[int] = []
        step: list[int] = []
        for index in order:
            if len(opening) < size:
                opening.append(index)
            step.append(index)
            if len(step) == size:
                if made >= first:
                    yield self._share(step)
                made, step = made + 1, []
        if step and not self.drop_last:
            while len(step) < size:
                step += opening[: size - len(step)]
            if made >= first:
                yield self._share(step)

    def _share(self, step: list[int]) -> list[int]:
        return step[self.rank * self.batch_size : (self.rank + 1) * self.batch_size]

    def _dealt(self, order: Iterator[int], first: int) -> Iterator[list[int]]:
        """Batch k of the loader's size goes to rank k mod world, handed out once every rank's batch
        of its round is drawn; the last ones may be missing or short."""
        held: list[int] | None = None
        for k, batch in enumerate(BatchSampler(order, self.batch_size, self.drop_last)):
            if k % self.world == self.rank and k // self.world >= first:
                held = batch
            if k % self.world == self.world - 1 and held is not None:
                yield held
                held = None
        if held is not None:
            yield held
