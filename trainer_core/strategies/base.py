"""The strategy interface (``trainer_core.strategies``): what the Accelerator asks of a way of
spreading a model over the ranks."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Protocol

import torch

__all__ = ["Strategy"]


class Strategy(Protocol):
    name: str

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
