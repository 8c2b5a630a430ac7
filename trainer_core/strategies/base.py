"""The strategy interface (``trainer_core.strategies``): what the Accelerator asks of a way of
spreading a model over the ranks, and ``BaseStrategy``, what every strategy does unless it says otherwise.

Examples:
    >>> import torch
    >>> from trainer_core.state import DistributedState
    >>> strategy = BaseStrategy(DistributedState.from_environment(use_cpu=True))
    >>> model = strategy.setup_module(torch.nn.Linear(2, 2))
    >>> strategy.unwrap(model) is model, strategy.joinable(model), strategy.data_shard()
    (True, False, (0, 1))
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from .. import ops

__all__ = ["Strategy", "PrepareSettings", "BaseStrategy"]


@dataclass(frozen=True)
class PrepareSettings:
    """What a strategy that builds an engine at ``prepare`` needs to know of the Accelerator.

    Examples:
        >>> PrepareSettings(gradient_accumulation_steps=2, mixed_precision="bf16").split_batches
        False
    """

    gradient_accumulation_steps: int
    mixed_precision: str
    split_batches: bool = False


class Strategy(Protocol):
    name: str
    shards_state: bool  # each rank holds a part of the parameters or optimizer state (FSDP, ZeRO)

    def adapt_precision(self, precision: Any) -> Any:
        """The Accelerator's precision as this strategy runs it (an engine that casts and scales
        itself keeps only the forward's autocast)."""
        ...

    def prepare_together(self, objects: Sequence[Any], settings: PrepareSettings) -> list[Any]:
        """The objects of one ``prepare`` call, with those the strategy must set up as one (a model
        with its optimizer) replaced; the rest unchanged."""
        ...

    def setup_module(self, model: torch.nn.Module) -> torch.nn.Module:
        """The model on this rank's device, wrapped for training with the others (or not)."""
        ...

    def setup_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """The optimizer as the strategy needs it (unchanged for data-parallel strategies)."""
        ...

    def no_sync(self, model: torch.nn.Module) -> AbstractContextManager[Any]:
        """A context in which backward does not synchronize gradients (accumulation)."""
        ...

    def sync_next_backward(self, model: torch.nn.Module) -> AbstractContextManager[Any]:
        """A context whose backward synchronizes gradients even inside ``no_sync``."""
        ...

    def backward(self, loss: torch.Tensor, precision: Any, accumulation_steps: int, sync: bool, **kwargs: Any) -> None:
        """Back-propagate ``loss`` of one micro-batch (``sync``: the last before an optimizer step)."""
        ...

    def clip_grad_norm(self, parameters: Any, max_norm: float, norm_type: float = 2) -> Any:
        """Clip the gradients' total norm to ``max_norm``; return the norm before clipping."""
        ...

    def unwrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """The user's module inside whatever ``setup_module`` wrapped around it."""
        ...

    def compile(self, model: torch.nn.Module, settings: Any) -> torch.nn.Module:
        """``model`` (as ``setup_module`` left it) compiled as ``settings`` (``DynamoSettings``) say."""
        ...

    def module_state_dict(self, model: torch.nn.Module) -> dict[str, Any]:
        """The full weights of the user's module (every rank gets them)."""
        ...

    def load_module_state_dict(self, model: torch.nn.Module, state_dict: dict[str, Any]) -> None:
        """Load full weights into the user's module."""
        ...

    def joinable(self, model: torch.nn.Module) -> bool:
        """Whether ``model`` can shadow its peers' collectives when this rank runs out of inputs."""
        ...

    def save_training_state(self, models: list, optimizers: list, directory: str) -> bool:
        """Write the models and optimizers into ``directory`` on every rank, if the strategy keeps them
        in a form of its own (shards); False: the main process writes them whole."""
        ...

    def load_training_state(self, models: list, optimizers: list, directory: str) -> bool:
        """Read what ``save_training_state`` wrote; False when it wrote nothing."""
        ...

    def data_shard(self) -> tuple[int, int]:
        """(this rank's index, the number of ranks) among the ranks that load different batches:
        ranks that hold parts of one model (tensor parallelism) share theirs."""
        ...

    def reduce(self, data: Any, reduction: str = "sum", scale: float = 1.0) -> Any:
        """Every tensor in ``data`` reduced across the ranks."""
        ...

    def all_gather(self, data: Any) -> Any:
        """Every rank's tensors concatenated in rank order."""
        ...


class BaseStrategy:
    """What a strategy does unless it says otherwise: the model moved to the rank's device, the
    optimizer as given, no gradient sync to skip, whole state dicts, every rank its own share of
    the data, collectives through the state's backend. Strategies derive from
    ``SingleProcessStrategy`` or ``ParallelStrategy``, never from each other."""

    name = "base"
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

    def compile(self, model: torch.nn.Module, settings: Any) -> torch.nn.Module:
        """Compiled around whatever wraps it (DDP), as Accelerate compiles: ``trainer_core.compiling``."""
        from ..compiling import compile_model

        return compile_model(model, settings)

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

    def data_shard(self) -> tuple[int, int]:
        """(this rank's index, the number of ranks) among those that get different batches."""
        return self.state.process_index, self.state.num_processes

    def reduce(self, data: Any, reduction: str = "sum", scale: float = 1.0) -> Any:
        return ops.reduce(self.state, data, reduction, scale)

    def all_gather(self, data: Any) -> Any:
        return ops.gather(self.state, data)
