"""One process, or ranks whose backend averages gradients itself: the model is only moved.

Examples:
    >>> import torch
    >>> from trainer_core.state import DistributedState
    >>> strategy = SingleProcessStrategy(DistributedState.from_environment(use_cpu=True))
    >>> model = strategy.setup_module(torch.nn.Linear(2, 2))
    >>> strategy.unwrap(model) is model, strategy.joinable(model)
    (True, False)
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

import torch

from .. import ops
from .base import PrepareSettings

__all__ = ["SingleProcessStrategy"]


class SingleProcessStrategy:
    name = "single"
    shards_state = False

    def __init__(self, state: Any) -> None:
        self.state = state

    def adapt_precision(self, precision: Any) -> Any:
        return precision

    def prepare_together(self, objects: Sequence[Any], settings: PrepareSettings) -> list[Any]:
        return list(objects)

    def setup_module(self, model: torch.nn.Module) -> torch.nn.Module:
        return model.to(self.state.device)

    def setup_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        return optimizer

    def no_sync(self, model: torch.nn.Module) -> AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def sync_next_backward(self, model: torch.nn.Module) -> AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def backward(self, loss: torch.Tensor, precision: Any, accumulation_steps: int, sync: bool, **kwargs: Any) -> None:
        """``loss`` divided over the accumulated micro-batches, scaled (fp16), back-propagated."""
        if accumulation_steps > 1:
            loss = loss / accumulation_steps
        precision.scale_loss(loss).backward(**kwargs)

    def clip_grad_norm(self, parameters: Any, max_norm: float, norm_type: float = 2) -> Any:
        norm = torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type=norm_type)
        return norm.full_tensor() if hasattr(norm, "full_tensor") else norm  # sharded gradients: a DTensor norm

    def unwrap(self, model: torch.nn.Module) -> torch.nn.Module:
        return model

    def module_state_dict(self, model: torch.nn.Module) -> dict[str, Any]:
        return self.unwrap(model).state_dict()

    def load_module_state_dict(self, model: torch.nn.Module, state_dict: dict[str, Any]) -> None:
        self.unwrap(model).load_state_dict(state_dict)

    def joinable(self, model: torch.nn.Module) -> bool:
        return False

    def save_training_state(self, models: list, optimizers: list, directory: str) -> bool:
        """Whole models and optimizers are written by the main process (``checkpoint``): nothing here."""
        return False

    def load_training_state(self, models: list, optimizers: list, directory: str) -> bool:
        return False

    def reduce(self, data: Any, reduction: str = "sum", scale: float = 1.0) -> Any:
        return ops.reduce(self.state, data, reduction, scale)

    def all_gather(self, data: Any) -> Any:
        return ops.gather(self.state, data)
