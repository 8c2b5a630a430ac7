"""Prepared data loaders: each rank gets its share of every epoch, with the same number of batches.

Map-style datasets: every rank draws the same epoch order (sequential, or a permutation seeded by
rank 0's seed and the epoch), which is cut into global steps of ``num_processes × batch_size``
samples; rank r takes the r-th slice of each step. When the last step is short it is completed with
samples from the start of the epoch ("even batches", so no rank waits alone in a collective), and
``DataState.remainder`` says how many samples of that step are real. Gathering a step's outputs in
rank order therefore yields the samples in dataset order, and ``gather_for_metrics`` drops the
padding — exactly the dataset's samples.

Other loaders (iterable datasets, custom batch samplers): every rank iterates the loader and keeps
every ``num_processes``-th batch; a short last round is completed with batches from the first round.

Example (assuming 2 processes, 10 samples, batch_size=4):
    rank 0 gets [0..3], [8, 9, 0, 1];  rank 1 gets [4..7], [2, 3, 4, 5];  remainder of the last step: 2
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, RandomSampler, SequentialSampler

from .ops import apply_to_tensors

__all__ = ["DataState", "PreparedDataLoader", "ShardedBatchSampler"]


class DataState:
    """What the loader being iterated says about the current step (read by accumulate/gather)."""

    def __init__(self):
        self.end_of_dataloader = False
        self.remainder = None

    def at_step(self, last, remainder):
        self.end_of_dataloader = last
        self.remainder = remainder if last else None

    def reset(self):
        self.at_step(False, None)


class ShardedBatchSampler:
    """This rank's batches of indices for one epoch (see the module docstring)."""

    def __init__(self, dataset_size, batch_size, drop_last, shuffle, seed, rank, world):
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
    def global_batch(self):
        return self.batch_size * self.world

    def __len__(self):
        if self.drop_last:
            return self.dataset_size // self.global_batch
        return math.ceil(self.dataset_size / self.global_batch)

    @property
    def remainder(self):
        """Real samples in the last global step."""
        if self.drop_last or len(self) == 0:
            return self.global_batch
        return self.dataset_size - (len(self) - 1) * self.global_batch

    def epoch_order(self):
        if not self.shuffle:
            return list(range(self.dataset_size))
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        return torch.randperm(self.dataset_size, generator=generator).tolist()

    def __iter__(self):
        order = self.epoch_order()
        needed = len(self) * self.global_batch
        while order and len(order) < needed:
            order += order[: needed - len(order)]
        first, self.start = self.start, 0
        for step in range(first, len(self)):
            start = step * self.global_batch + self.rank * self.batch_size
            yield order[start : start + self.batch_size]


class PreparedDataLoader:
    """A rank's view of a DataLoader: its shard, batches on the rank's device, epochs counted.

    Iterating it marks the last batch in the shared ``DataState`` (for gradient sync and
    ``gather_for_metrics``). ``set_epoch(n)`` chooses the epoch's shuffle; without calls the epoch
    advances after every complete pass.
    """

    def __init__(self, loader, state, data_state, seed):
        self.base = loader
        self._state = state
        self._data_state = data_state
        self.epoch = 0
        self._skip = 0
        self._sampler = _sharded_sampler(loader, state, seed)
        sharded = _rebuild(loader, self._sampler) if self._sampler is not None else loader
        self._loader = state.backend.device_loader(sharded, state.device)

    @property
    def dataset(self):
        return self.base.dataset

    @property
    def batch_size(self):
        return self.base.batch_size

    def set_epoch(self, epoch):
        self.epoch = epoch

    def skip(self, num_batches):
        """This loader, starting ``num_batches`` into its next epoch (``Accelerator.skip_first_batches``)."""
        return _SkipFirst(self, num_batches)

    def __len__(self):
        if self._sampler is not None:
            return len(self._sampler)
        return math.ceil(len(self.base) / self._state.num_processes)

    def __iter__(self):
        self._start_epoch()
        device = self._state.device
        batches = self._batches()
        try:
            current = next(batches)
        except StopIteration:
            return
        while True:
            try:
                following, last = next(batches), False
            except StopIteration:
                following, last = None, True
            batch, remainder = current
            self._data_state.at_step(last, remainder)
            yield apply_to_tensors(lambda t: t.to(device, non_blocking=True), batch)
            if last:
                break
            current = following
        self._data_state.reset()
        self.epoch += 1

    def _start_epoch(self):
        if self._sampler is not None:
            self._sampler.epoch = self.epoch
        owners: tuple[Any, ...] = (self.base.dataset, getattr(self.base, "sampler", None))
        for owner in owners:
            if hasattr(owner, "set_epoch"):
                owner.set_epoch(self.epoch)

    def _batches(self):
        """(batch, real samples in this global step) pairs of this rank."""
        skip, self._skip = self._skip, 0
        if self._sampler is not None:
            count, remainder = len(self._sampler), self._sampler.remainder
            self._sampler.start = skip  # the sampler starts there: skipped batches are never loaded
            for index, batch in enumerate(self._loader, start=skip):
                yield batch, (remainder if index == count - 1 else None)
            return
        batches = _round_robin(self._loader, self._state.process_index, self._state.num_processes)
        for index, item in enumerate(batches):
            if index >= skip:
                yield item


class _SkipFirst:
    """A prepared loader whose next epoch starts ``num_batches`` in; everything else is the loader's."""

    def __init__(self, loader, num_batches):
        if not isinstance(num_batches, int) or num_batches < 0:
            raise ValueError(f"num_batches must be an int >= 0, got {num_batches!r}")
        self._loader = loader
        self.num_batches = num_batches

    def __len__(self):
        return max(0, len(self._loader) - self.num_batches)

    def __iter__(self):
        self._loader._skip = self.num_batches
        return iter(self._loader)

    def __getattr__(self, name):
        return getattr(self._loader, name)


def _sharded_sampler(loader, state, seed):
    """Our sampler for a standard map-style loader with a batch size; None for anything else."""
    if isinstance(loader.dataset, IterableDataset) or not isinstance(loader.batch_sampler, BatchSampler):
        return None
    sampler = loader.batch_sampler.sampler
    if not isinstance(sampler, (RandomSampler, SequentialSampler)):
        return None
    if isinstance(sampler, RandomSampler) and sampler.generator is not None:
        seed = sampler.generator.initial_seed()
    return ShardedBatchSampler(
        len(loader.dataset),
        loader.batch_size,
        loader.drop_last,
        isinstance(sampler, RandomSampler),
        seed,
        state.process_index,
        state.num_processes,
    )


def _rebuild(loader, batch_sampler):
    options = dict(
        num_workers=loader.num_workers,
        collate_fn=loader.collate_fn,
        pin_memory=loader.pin_memory,
        timeout=loader.timeout,
        worker_init_fn=loader.worker_init_fn,
        multiprocessing_context=loader.multiprocessing_context,
        generator=loader.generator,
    )
    if loader.num_workers > 0:
        options.update(prefetch_factor=loader.prefetch_factor, persistent_workers=loader.persistent_workers)
    return DataLoader(loader.dataset, batch_sampler=batch_sampler, **options)


def _round_robin(loader, rank, world):
    first_round: list = []
    current: list = []
    for batch in loader:
        current.append(batch)
        if len(current) == world:
            if not first_round:
                first_round = list(current)
            yield current[rank], None
            current = []
    if not current:
        return
    real = sum(_batch_len(batch) for batch in current)
    fill = first_round or current
    padded = current + [fill[i % len(fill)] for i in range(world - len(current))]
    yield padded[rank], real


def _batch_len(batch):
    if isinstance(batch, torch.Tensor):
        return batch.shape[0] if batch.dim() else 1
    if isinstance(batch, (list, tuple)) and batch:
        return _batch_len(batch[0])
    if isinstance(batch, dict) and batch:
        return _batch_len(next(iter(batch.values())))
    return 1
