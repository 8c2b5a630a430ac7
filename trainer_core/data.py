"""Prepared data loaders: each rank gets its share of every epoch, with the same number of batches.

Map-style datasets: every rank draws the same epoch order (sequential; the user's sampler, seeded
alike on every rank — a plain ``RandomSampler`` as Accelerate seeds it, ``compat.shuffle``; or, with
``data_seed``/``use_seedable_sampler``, a permutation seeded by that seed and the epoch), which is
cut into global steps of ``num_processes × batch_size`` samples; rank r takes the r-th slice of each
step. When the last step is short it is completed with samples from the start of the epoch ("even
batches", so no rank waits alone in a collective), and ``DataState.remainder`` says how many samples
of that step are real. Gathering a step's outputs in rank order therefore yields the samples in
dataset order, and ``gather_for_metrics`` drops the padding — exactly the dataset's samples.

Other loaders (iterable datasets, custom batch samplers): every rank iterates the loader and keeps
every ``num_processes``-th batch; a short last round is completed with batches from the first round.

Example (assuming 2 processes, 10 samples, batch_size=4):
    rank 0 gets [0..3], [8, 9, 0, 1];  rank 1 gets [4..7], [2, 3, 4, 5];  remainder of the last step: 2
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, RandomSampler, SequentialSampler

from .ops import apply_to_tensors
from .sharding import ShardedBatchSampler

if TYPE_CHECKING:
    from .compat.shuffle import SamplerShuffle
    from .state import DistributedState
    from .throughput import Throughput

__all__ = ["DataState", "PreparedDataLoader", "ShardedBatchSampler"]


class DataState:
    """What the loader being iterated says about the current step (read by accumulate/gather).

    Loaders nest (an evaluation loop inside a training loop): the innermost one running is the
    ``active_dataloader``, and when it ends the outer one is active again with its own state. It is
    also the Accelerator's ``gradient_state``, under Accelerate's names.
    """

    def __init__(self, meter: Throughput | None = None) -> None:
        self._running: list[list] = []  # [loader, end_of_dataloader, remainder], innermost last
        self._meter = meter

    @property
    def active_dataloader(self) -> Any:
        return self._running[-1][0] if self._running else None

    @property
    def end_of_dataloader(self) -> bool:
        return self._running[-1][1] if self._running else False

    @property
    def remainder(self) -> int | None:
        return self._running[-1][2] if self._running else None

    @property
    def in_dataloader(self) -> bool:
        return bool(self._running)

    def begin(self, loader: Any) -> None:
        self._running.append([loader, False, None])

    def at_step(self, last: bool, remainder: int | None) -> None:
        if self._running:
            self._running[-1][1:] = [last, remainder if last else None]

    def took(self, batch: Any) -> None:
        """A loader yields ``batch``: counted in the rank's pace when the outermost loader running
        (the training loop's, not an evaluation inside it) yields it."""
        if self._meter is not None and len(self._running) == 1:
            self._meter.batch(batch)

    def end(self, loader: Any) -> None:
        for index in range(len(self._running) - 1, -1, -1):
            if self._running[index][0] is loader:
                del self._running[index]
                return

    def reset(self) -> None:
        self._running.clear()


class PreparedDataLoader(DataLoader):
    """A rank's view of a DataLoader: its shard, batches on the rank's device, epochs counted.

    Iterating it marks the last batch in the shared ``DataState`` (for gradient sync and
    ``gather_for_metrics``). ``set_epoch(n)`` chooses the epoch's shuffle; without calls the epoch
    advances after every complete pass. A ``DataLoader`` to ``isinstance`` (as Accelerate's are;
    ``DataLoader.__init__`` is not run), whose other attributes (``num_workers``, ``collate_fn``,
    ...) are the wrapped loader's.
    """

    def __init__(
        self,
        loader: DataLoader,
        state: DistributedState,
        data_state: DataState,
        seed: int,
        split_batches: bool = False,
        even_batches: bool = True,
        shuffle: SamplerShuffle | None = None,
    ) -> None:
        self.base = loader
        self._state = state
        self._data_state = data_state
        self.epoch = 0
        self._skip = 0
        self._yielded = 0  # batches handed out in the current pass (``state_dict``)
        self._seed = seed
        self._shuffle = shuffle  # a SamplerShuffle owning the loader's RandomSampler's generator, or None
        self._sampler = _sharded_sampler(loader, state, seed, split_batches, shuffle)
        if self._sampler is not None:
            self._sampler.even_batches = even_batches
        # loaders we deal out batch by batch: a RandomSampler inside that would draw from each rank's
        # own RNG gets a generator seeded alike on every rank (rank 0's seed and the epoch)
        self._synced = [] if self._sampler is not None else _unseeded_random_samplers(loader)
        sharded = _rebuild(loader, self._sampler) if self._sampler is not None else loader
        self._loader = state.backend.device_loader(sharded, state.device)

    def __getattr__(self, name: str) -> Any:
        if name == "base":  # not set yet (or unpickling): no loader to ask
            raise AttributeError(name)
        return getattr(self.base, name)

    @property
    def dataset(self) -> Any:  # type: ignore[override]  # the wrapped one's
        return self.base.dataset

    @property
    def batch_sampler(self) -> Any:  # type: ignore[override]  # the wrapped one's
        """This rank's batch sampler (``even_batches`` can be changed on it), or the loader's own."""
        return self._sampler if self._sampler is not None else self.base.batch_sampler

    @property
    def batch_size(self) -> int | None:  # type: ignore[override]  # the wrapped one's
        return self.base.batch_size

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def skip(self, num_batches: int) -> _SkipFirst:
        """This loader, starting ``num_batches`` into its next epoch (``Accelerator.skip_first_batches``)."""
        return _SkipFirst(self, num_batches)

    def __len__(self) -> int:
        if self._sampler is not None:
            return len(self._sampler)
        return math.ceil(len(self.base) / self._state.num_processes)

    def state_dict(self) -> dict[str, Any]:
        """Where this loader is: its epoch, the batches it has handed out in it, and the shuffle's
        generator state the epoch's order came from (``compat.shuffle``; None without one).

        Examples:
            >>> loader.state_dict()   # doctest: +SKIP
            {'epoch': 2, 'yielded': 3, 'shuffle': None}
        """
        shuffle = None if self._shuffle is None else self._shuffle.state_dict()
        return {"epoch": self.epoch, "yielded": self._yielded, "shuffle": None if shuffle is None else shuffle.tolist()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The next pass resumes where ``state`` was: that epoch, after the batches already handed out."""
        self.epoch = int(state["epoch"])
        self._skip = int(state["yielded"])
        self.load_shuffle(state)

    def load_shuffle(self, state: dict[str, Any]) -> None:
        """The next epoch's order starts from the shuffle state in ``state`` (a ``state_dict``)."""
        if self._shuffle is not None and state.get("shuffle") is not None:
            self._shuffle.load_state_dict(torch.tensor(state["shuffle"], dtype=torch.uint8))

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]  # a generator, not a DataLoader iterator
        self._start_epoch()
        device = self._state.device
        self._yielded = self._skip
        batches = self._batches()
        self._data_state.begin(self)
        try:
            yield from self._steps(batches, device)
        finally:
            self._data_state.end(self)
        self.epoch += 1
        self._yielded = 0
        if self._shuffle is not None:
            self._shuffle.end_epoch()

    def _steps(self, batches: Iterator[tuple[Any, int | None]], device: Any) -> Iterator[Any]:
        try:
            current: tuple[Any, int | None] | None = next(batches)
        except StopIteration:
            return
        while current is not None:
            try:
                following, last = next(batches), False
            except StopIteration:
                following, last = None, True
            batch, remainder = current
            self._data_state.at_step(last, remainder)
            self._data_state.took(batch)
            self._yielded += 1
            yield apply_to_tensors(lambda t: t.to(device, non_blocking=True), batch)
            if last:
                break
            current = following

    def _start_epoch(self) -> None:
        for sampler in self._synced:
            sampler.generator = torch.Generator().manual_seed(self._seed + self.epoch)
        if self._sampler is not None:
            self._sampler.epoch = self.epoch
        owners: tuple[Any, ...] = (self.base.dataset, getattr(self.base, "sampler", None))
        for owner in owners:
            if hasattr(owner, "set_epoch"):
                owner.set_epoch(self.epoch)

    def _batches(self) -> Iterator[tuple[Any, int | None]]:
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

    def __init__(self, loader: PreparedDataLoader, num_batches: int) -> None:
        if not isinstance(num_batches, int) or num_batches < 0:
            raise ValueError(f"num_batches must be an int >= 0, got {num_batches!r}")
        self._loader = loader
        self.num_batches = num_batches

    def __len__(self) -> int:
        return max(0, len(self._loader) - self.num_batches)

    def __iter__(self) -> Iterator[Any]:
        self._loader._skip = self.num_batches
        return iter(self._loader)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


def map_batch_sampler(loader: DataLoader) -> BatchSampler | None:
    """The loader's ``BatchSampler`` when it batches a map-style dataset, else None."""
    batch_sampler = loader.batch_sampler
    if isinstance(loader.dataset, IterableDataset) or not isinstance(batch_sampler, BatchSampler):
        return None
    return batch_sampler


def _sharded_sampler(
    loader: DataLoader,
    state: DistributedState,
    seed: int,
    split_batches: bool = False,
    shuffle: SamplerShuffle | None = None,
) -> ShardedBatchSampler | None:
    """Our sampler for a map-style loader batched by a ``BatchSampler``; None for anything else.

    The user's sampler is kept — and iterated on every rank, in step — when its order is the same
    on every rank: a sampler seeded by its own generator (``RandomSampler(generator=...)``,
    ``DataLoader(shuffle=True, generator=...)``), a ``RandomSampler`` subclass with its own seeding
    (Accelerate's ``SeedableRandomSampler``), or any other sampler. Only a ``RandomSampler`` that
    would draw from each rank's global RNG is replaced, by a permutation seeded with rank 0's seed
    (or ``data_seed``) and the epoch, which every rank draws alike — unless ``shuffle`` (a
    ``SamplerShuffle``) owns its generator: then it is kept, in Accelerate's order (``compat.shuffle``).
    """
    batch_sampler = map_batch_sampler(loader)
    if batch_sampler is None:
        return None
    sampler = batch_sampler.sampler
    batch_size = batch_sampler.batch_size
    if split_batches:
        if batch_size % state.num_processes:
            raise ValueError(
                f"split_batches=True needs a batch size divisible by the {state.num_processes} processes,"
                f" got {batch_size}"
            )
        batch_size //= state.num_processes
    plain_random = type(sampler) is RandomSampler and sampler.generator is None and shuffle is None
    return ShardedBatchSampler(
        len(sampler),  # type: ignore[arg-type]  # a BatchSampler's sampler is sized
        batch_size,
        batch_sampler.drop_last,
        isinstance(sampler, RandomSampler),
        seed,
        state.process_index,
        state.num_processes,
        source=None if plain_random or isinstance(sampler, SequentialSampler) else sampler,
        before_order=None if shuffle is None else shuffle.before_order,
    )


def _unseeded_random_samplers(loader: DataLoader) -> list[RandomSampler]:
    """The RandomSamplers without a generator in ``loader`` (as its sampler, or inside its batch sampler)."""
    found = []
    for holder in (loader.sampler, loader.batch_sampler):
        for candidate in (holder, getattr(holder, "sampler", None)):
            if type(candidate) is RandomSampler and candidate.generator is None and candidate not in found:
                found.append(candidate)
    return found


def _rebuild(loader: DataLoader, batch_sampler: ShardedBatchSampler) -> DataLoader:
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


def _round_robin(loader: Any, rank: int, world: int) -> Iterator[tuple[Any, int | None]]:
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


def _batch_len(batch: Any) -> int:
    if isinstance(batch, torch.Tensor):
        return batch.shape[0] if batch.dim() else 1
    if isinstance(batch, (list, tuple)) and batch:
        return _batch_len(batch[0])
    if isinstance(batch, dict) and batch:
        return _batch_len(next(iter(batch.values())))
    return 1
