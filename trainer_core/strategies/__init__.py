"""How a model is spread over the ranks, behind one small interface chosen once by ``select_strategy``.

A strategy wraps the model for training (``setup_module``), prepares its optimizer
(``setup_optimizer``), controls the gradient sync of a backward (``no_sync``,
``sync_next_backward``), gives back the user's module and its weights (``unwrap``,
``module_state_dict``, ``load_module_state_dict``), says which share of the data a rank loads
(``data_shard``) and which models can shadow the others' collectives when inputs are uneven
(``joinable``). Collectives (``reduce``, ``all_gather``) go through the state's backend.

One process (``single``), DDP (CPU/gloo and CUDA/NCCL, ``ddp``) and XLA (``xla``) are modules; a
parallelism with options of its own is a folder holding its plugin, strategy, precision and
checkpoint files (``fsdp/``: FSDP2, ``deepspeed/``: ZeRO), found here by its plugin's type
(``register_sharding``). A new way of sharding a model is a new folder, not branches in the Accelerator.

Examples:
    >>> from trainer_core.state import DistributedState
    >>> select_strategy(DistributedState.from_environment(use_cpu=True)).name
    'single'
    >>> from trainer_core import FullyShardedDataParallelPlugin
    >>> sharding_strategy(FullyShardedDataParallelPlugin()).__name__
    'FSDP2Strategy'
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from .base import BaseStrategy, PrepareSettings, Strategy
from .ddp import DDPStrategy
from .deepspeed.plugin import DeepSpeedPlugin
from .fsdp.plugin import FullyShardedDataParallelPlugin
from .parallel import ParallelStrategy
from .single import SingleProcessStrategy

__all__ = [
    "select_strategy",
    "register_sharding",
    "sharding_strategy",
    "Strategy",
    "BaseStrategy",
    "PrepareSettings",
    "SingleProcessStrategy",
    "ParallelStrategy",
    "DDPStrategy",
]

# The strategy of each sharding plugin type, "module:Class", imported when a plugin of it is used.
_SHARDING: dict[type, str] = {}


def register_sharding(plugin_type: type, strategy: str) -> None:
    """Make an Accelerator given a ``plugin_type`` plugin train with ``strategy`` ("module:Class" of
    a ``ParallelStrategy``, built with ``Class.for_plugin(state, plugin, mesh)``)."""
    _SHARDING[plugin_type] = strategy


register_sharding(FullyShardedDataParallelPlugin, "trainer_core.strategies.fsdp.strategy:FSDP2Strategy")
register_sharding(DeepSpeedPlugin, "trainer_core.strategies.deepspeed.strategy:DeepSpeedStrategy")


def sharding_strategy(plugin: Any) -> type[ParallelStrategy]:
    """The strategy class registered for ``plugin``'s type (or the nearest base type registered)."""
    for kind in type(plugin).__mro__:
        if kind in _SHARDING:
            module, _, name = _SHARDING[kind].partition(":")
            strategy: type[ParallelStrategy] = getattr(importlib.import_module(module), name)
            return strategy
    known = ", ".join(kind.__name__ for kind in _SHARDING)
    raise TypeError(f"no strategy shards with a {type(plugin).__name__}; the sharding plugins are {known}")


def select_strategy(
    state: Any, ddp_kwargs: dict | None = None, sharding: Any = None, mesh: Any = None, comm_hook: Any = None
) -> Strategy:
    """One process: ``SingleProcessStrategy``; several with a sharding plugin (FSDP, DeepSpeed): the
    strategy registered for its type (on ``mesh`` when the ranks form one); several, on a backend
    whose gradients DDP averages: ``DDPStrategy`` (``ddp_kwargs``: ``DistributedDataParallel``
    options, ``comm_hook`` its ``(state, hook)``); several on XLA, whose optimizer step all-reduces
    the gradients: ``XlaStrategy``."""
    if not state.distributed:
        if sharding is not None:
            warnings.warn(
                f"{sharding.argument_name} has no effect in one process: the model is not sharded", stacklevel=3
            )
        return SingleProcessStrategy(state)
    if sharding is not None:
        if not state.backend.wraps_ddp:
            raise ValueError(
                f"{sharding.argument_name} is not supported on TPUs (XLA): use the XLA strategy's data parallelism"
            )
        made: Strategy = sharding_strategy(sharding).for_plugin(state, sharding, mesh)
        return made
    if state.backend.wraps_ddp:
        return DDPStrategy(state, ddp_kwargs or {}, comm_hook)
    from .xla import XlaStrategy

    return XlaStrategy(state)
