"""``DataLoaderConfiguration``: how ``prepare`` shards data loaders (``trainer_core.data`` does it).

Examples:
    >>> DataLoaderConfiguration.from_any(None).split_batches
    False
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["DataLoaderConfiguration"]


@dataclass
class DataLoaderConfiguration:
    """How ``prepare`` shards data loaders; the fields of Accelerate's class of the same name
    (whose instances are accepted too).

    ``split_batches``: the loader's batch is the global batch, split between the processes (else each
    process gets batches of the loader's size). ``data_seed`` or ``use_seedable_sampler=True``: the
    shuffle order is a permutation seeded by ``data_seed`` (else rank 0's torch seed) and the epoch,
    the same with any number of processes; without them a plain ``shuffle=True`` shuffles as
    Accelerate does (``trainer_core.compat.shuffle``: the same weights as Accelerate for the same seed).
    ``even_batches=False``: the loader's batches are dealt out to the processes in turn, without
    padding (some get one batch fewer or a shorter last one; use ``join_uneven_inputs`` for DDP).
    ``use_stateful_dataloader=True``: ``save_state``/``load_state`` also keep where each loader was
    in its epoch (a prepared loader always has ``state_dict``/``load_state_dict``).
    ``dispatch_batches=True``: each process gets the batches rank 0 would have dispatched to it,
    loaded by the process itself (every process iterates the loader in step; an iterable dataset
    must give every process the same stream).
    """

    split_batches: bool = False
    dispatch_batches: bool | None = None
    even_batches: bool = True
    use_seedable_sampler: bool = False
    data_seed: int | None = None
    non_blocking: bool = False
    use_stateful_dataloader: bool = False

    @classmethod
    def from_any(cls, config: Any) -> DataLoaderConfiguration:
        """Ours, from ours, Accelerate's, or None (the defaults)."""
        if config is None:
            return cls()
        values = {name: getattr(config, name) for name in cls.__dataclass_fields__ if hasattr(config, name)}
        made = cls(**values)
        return made
