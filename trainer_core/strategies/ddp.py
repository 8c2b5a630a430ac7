"""Data parallel over ``torch.distributed`` (CPU/gloo, CUDA/NCCL): every rank holds the whole model,
``DistributedDataParallel`` averages the gradients during backward.

Examples:
    >>> import torch
    >>> from trainer_core.state import DistributedState
    >>> strategy = DDPStrategy(DistributedState.from_environment(use_cpu=True), {})
    >>> strategy.name, strategy.joinable(torch.nn.Linear(2, 2))
    ('ddp', False)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from .parallel import ParallelStrategy

__all__ = ["DDPStrategy"]


class DDPStrategy(ParallelStrategy):
    name = "ddp"

    def __init__(self, state: Any, ddp_kwargs: dict[str, Any], comm_hook: tuple[Any, Any] | None = None) -> None:
        super().__init__(state)
        self._options = {**state.backend.ddp_options(state.local_process_index), **ddp_kwargs}
        self._comm_hook = comm_hook  # (state, hook) for register_comm_hook, or None

    def setup_module(self, model: torch.nn.Module) -> torch.nn.Module:
        wrapped = DistributedDataParallel(super().setup_module(model), **self._options)
        if self._comm_hook is not None:
            wrapped.register_comm_hook(*self._comm_hook)
        return wrapped

    def no_sync(self, model: torch.nn.Module) -> AbstractContextManager[Any]:
        if isinstance(model, DistributedDataParallel):
            return model.no_sync()
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def sync_next_backward(self, model: torch.nn.Module) -> Iterator[None]:
        """Several forwards before one backward: the reducer is told to expect it, once."""
        if not isinstance(model, DistributedDataParallel):
            yield
            return
        before = (model.require_forward_param_sync, model.require_backward_grad_sync)
        model.require_forward_param_sync = True
        model.require_backward_grad_sync = True
        model.reducer.prepare_for_backward([])
        try:
            yield
        finally:
            model.require_forward_param_sync, model.require_backward_grad_sync = before

    def unwrap(self, model: torch.nn.Module) -> torch.nn.Module:
        return model.module if isinstance(model, DistributedDataParallel) else model

    def joinable(self, model: torch.nn.Module) -> bool:
        return isinstance(model, DistributedDataParallel)
