"""What one rank holds of a model's training state: parameters, gradients, optimizer state, in bytes.

Counted from the tensors themselves, whatever the strategy made of them: a DDP replica, FSDP2's
``DTensor`` shards, DeepSpeed ZeRO's partitions (``ds_tensor``) and the flat fp32 copies its
optimizer steps. Each storage counts once, so a tensor that is a view of another (ZeRO's model
parameters inside its flat buffer, an fp32 "copy" that is the parameter itself) is not counted twice.

Examples:
    >>> import torch
    >>> model = torch.nn.Linear(10, 10)                    # 110 fp32 parameters: 440 bytes
    >>> optimizer = torch.optim.Adam(model.parameters())
    >>> model(torch.ones(1, 10)).sum().backward(); optimizer.step()
    >>> held_bytes([model], [optimizer])
    {'parameters': 440, 'gradients': 440, 'optimizer': 880}
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

__all__ = ["held_bytes"]


def held_bytes(models: Iterable[torch.nn.Module], optimizers: Iterable[Any]) -> dict[str, int]:
    """Bytes of this rank's parameters, gradients and optimizer state (with any master copies)."""
    seen: set[int] = set()
    parameters = [p for model in models for p in _module(model).parameters()]
    counts = {
        "parameters": _count((_local(getattr(p, "ds_tensor", p)) for p in parameters), seen),
        "gradients": _count((_local(p.grad) for p in parameters if p.grad is not None), seen),
    }
    held = []
    for optimizer in optimizers:
        inner = _torch_optimizer(optimizer)
        for group in inner.param_groups:
            held += [_local(p) for p in group["params"]] + [
                _local(p.grad) for p in group["params"] if p.grad is not None
            ]
        held += [_local(v) for state in inner.state.values() for v in state.values() if torch.is_tensor(v) and v.dim()]
    counts["optimizer"] = _count(held, seen)
    return counts


def _count(tensors: Iterable[torch.Tensor], seen: set[int]) -> int:
    total = 0
    for tensor in tensors:
        storage = tensor.untyped_storage()
        if storage.nbytes() and storage.data_ptr() not in seen:
            seen.add(storage.data_ptr())
            total += storage.nbytes()
    return total


def _local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def _module(model: Any) -> torch.nn.Module:
    while hasattr(model, "module") and isinstance(model.module, torch.nn.Module):
        model = model.module  # DDP, DeepSpeed's engine
    return model


def _torch_optimizer(optimizer: Any) -> torch.optim.Optimizer:
    """The torch optimizer under the prepared, the engine's and ZeRO's wrappers."""
    from .optim import PreparedOptimizer

    if isinstance(optimizer, PreparedOptimizer):  # an Optimizer to isinstance, holding the real one
        optimizer = optimizer.optimizer
    while not isinstance(optimizer, torch.optim.Optimizer) and hasattr(optimizer, "optimizer"):
        optimizer = optimizer.optimizer
    return optimizer
