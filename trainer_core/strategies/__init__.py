"""How a model is spread over the ranks, behind one small interface chosen once by ``select_strategy``.

A strategy wraps the model for training (``setup_module``), prepares its optimizer
(``setup_optimizer``), controls the gradient sync of a backward (``no_sync``,
``sync_next_backward``), gives back the user's module and its weights (``unwrap``,
``module_state_dict``, ``load_module_state_dict``) and says which models can shadow the others'
collectives when inputs are uneven (``joinable``). Collectives (``reduce``, ``all_gather``) go
through the state's backend. One process, DDP (CPU/gloo and CUDA/NCCL), FSDP2, DeepSpeed ZeRO and
XLA live here; a new way of sharding a model is a new strategy, not branches in the Accelerator.

Examples:
    >>> from trainer_core.state import DistributedState
    >>> select_strategy(DistributedState.from_environment(use_cpu=True)).name
    'single'
"""

from __future__ import annotations

import warnings
from typing import Any

from .base import PrepareSettings, Strategy
from .ddp import DDPStrategy
from .single import SingleProcessStrategy

__all__ = ["select_strategy", "Strategy", "PrepareSettings", "SingleProcessStrategy", "DDPStrategy"]


def select_strategy(
    state: Any, ddp_kwargs: dict | None = None, sharding: Any = None, mesh: Any = None, comm_hook: Any = None
) -> Strategy:
    """One process: ``SingleProcessStrategy``; several with a sharding plugin (FSDP, DeepSpeed): the
    strategy it names (``sharding.make_strategy``, on ``mesh`` when the ranks form one); several, on
    a backend whose gradients DDP averages: ``DDPStrategy`` (``ddp_kwargs``: ``DistributedDataParallel``
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
        return sharding.make_strategy(state, mesh)
    if state.backend.wraps_ddp:
        return DDPStrategy(state, ddp_kwargs or {}, comm_hook)
    from .xla import XlaStrategy

    return XlaStrategy(state)
