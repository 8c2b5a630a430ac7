"""The strategy interface (``trainer_core.strategies``): what the Accelerator asks of a way of
spreading a model over the ranks."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

import torch

__all__ = ["Strategy", "PrepareSettings"]


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

    def reduce(self, data: Any, reduction: str = "sum", scale: float = 1.0) -> Any:
        """Every tensor in ``data`` reduced across the ranks."""
        ...

    def all_gather(self, data: Any) -> Any:
        """Every rank's tensors concatenated in rank order."""
        ...
