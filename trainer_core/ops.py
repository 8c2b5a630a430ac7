"""Collectives over tensors and nested structures of tensors (lists, tuples, dicts).

``gather`` accepts different first-dimension sizes on different ranks (the last batch of an
epoch often differs), so callers never need to pad by hand.

Example (one process here; with 2 processes, where rank r holds ``torch.tensor([r])``, the
result is ``tensor([0, 1])`` on both ranks):
    >>> from trainer_core import DistributedState
    >>> state = DistributedState.from_environment(use_cpu=True)
    >>> gather(state, torch.tensor([state.process_index]))
    tensor([0])
"""

from __future__ import annotations

import torch

__all__ = [
    "apply_to_tensors",
    "all_tensors",
    "gather",
    "gather_object",
    "reduce",
    "pad_across_processes",
    "broadcast_object",
]


def apply_to_tensors(function, data):
    """Apply ``function`` to every tensor in a nested list/tuple/dict, keeping the structure."""
    if isinstance(data, torch.Tensor):
        return function(data)
    if isinstance(data, (list, tuple)):
        items = [apply_to_tensors(function, item) for item in data]
        return type(data)(*items) if hasattr(data, "_fields") else type(data)(items)
    if isinstance(data, dict):
        return type(data)({key: apply_to_tensors(function, value) for key, value in data.items()})
    return data


def all_tensors(data):
    """Whether ``data`` is a tensor or a non-empty nested list/tuple/dict of nothing but tensors.

    Examples:
        >>> all_tensors({"x": torch.ones(1), "y": [torch.zeros(2)]}), all_tensors([torch.ones(1), "label"])
        (True, False)
    """
    if isinstance(data, torch.Tensor):
        return True
    if isinstance(data, (list, tuple)):
        return bool(data) and all(all_tensors(item) for item in data)
    if isinstance(data, dict):
        return bool(data) and all(all_tensors(item) for item in data.values())
    return False


def _sizes(state, tensor, dim=0):
    size = torch.tensor([tensor.shape[dim] if tensor.dim() else 1], device=tensor.device)
    return [int(s.item()) for s in state.backend.all_gather(size, state.num_processes)]


def _gather_one(state, tensor):
    if not state.distributed:
        return tensor
    tensor = tensor.contiguous()
    if tensor.dim() == 0:
        tensor = tensor.unsqueeze(0)
    sizes = _sizes(state, tensor)
    padded = _pad_dim0(tensor, max(sizes))
    parts = state.backend.all_gather(padded, state.num_processes)
    return torch.cat([part[:n] for part, n in zip(parts, sizes, strict=False)], dim=0)


def _pad_dim0(tensor, size):
    if tensor.shape[0] == size:
        return tensor
    pad = tensor.new_zeros((size - tensor.shape[0], *tuple(tensor.shape[1:])))
    return torch.cat([tensor, pad], dim=0)


def gather(state, data):
    """Concatenate every rank's tensors along dim 0, in rank order (sizes may differ)."""
    return apply_to_tensors(lambda t: _gather_one(state, t), data)


def gather_object(state, obj):
    """Every rank's picklable ``obj`` as a list in rank order (lists are concatenated)."""
    if not state.distributed:
        return list(obj) if isinstance(obj, list) else [obj]
    parts = state.backend.all_gather_object(obj, state.num_processes)
    if all(isinstance(part, list) for part in parts):
        return [item for part in parts for item in part]
    return parts


def broadcast_object(state, obj, src=0):
    """Rank ``src``'s ``obj`` on every rank."""
    if not state.distributed:
        return obj
    return state.backend.broadcast_object(obj, src)


def reduce(state, data, reduction="sum", scale=1.0):
    """Sum, mean, max or min of every tensor across ranks, times ``scale``; the inputs are not modified."""
    if reduction not in ("sum", "mean", "max", "min"):
        raise ValueError(f"reduction={reduction!r} is not valid; use 'sum', 'mean', 'max' or 'min'")

    def one(tensor):
        if not state.distributed:
            result = tensor.clone()
        elif reduction in ("max", "min"):
            stacked = torch.stack(state.backend.all_gather(tensor.contiguous(), state.num_processes))
            result = stacked.amax(0) if reduction == "max" else stacked.amin(0)
        else:
            result = state.backend.all_reduce_sum(tensor)
        if reduction == "mean":
            result = result / state.num_processes
        return result * scale if scale != 1.0 else result

    return apply_to_tensors(one, data)


def pad_across_processes(state, data, dim=0, pad_index=0, pad_first=False):
    """Pad every tensor along ``dim`` to the largest size any rank has, so they can be gathered."""

    def one(tensor):
        if not state.distributed or tensor.dim() <= dim:
            return tensor
        longest = max(_sizes(state, tensor, dim))
        if longest == tensor.shape[dim]:
            return tensor
        shape = list(tensor.shape)
        shape[dim] = longest
        out = tensor.new_full(shape, pad_index)
        start = longest - tensor.shape[dim] if pad_first else 0
        index = [slice(None)] * tensor.dim()
        index[dim] = slice(start, start + tensor.shape[dim])
        out[tuple(index)] = tensor
        return out

    return apply_to_tensors(one, data)
