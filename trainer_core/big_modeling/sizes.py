"""Sizes: memory strings ("10GiB", "150MB"), dtype widths, and what each module of a model weighs.

Examples:
    >>> parse_size("150MB"), parse_size("1GiB"), parse_size(512)
    (150000000, 1073741824, 512)
    >>> import torch
    >>> module_sizes(torch.nn.Linear(10, 10))[""]   # 100 weights + 10 biases, float32
    440
"""

from __future__ import annotations

import re

import torch

__all__ = ["parse_size", "format_size", "module_sizes", "tensor_bytes"]

_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}


def parse_size(size: int | str) -> int:
    """Bytes in ``size``: an int, or a string such as "10GiB", "150MB", "1.5GB" (KB/MB/GB are powers
    of 10, KiB/MiB/GiB powers of 2, as in Hugging Face's ``max_shard_size`` and ``max_memory``)."""
    if isinstance(size, bool):
        raise TypeError(f"a size is bytes (int) or a string like '10GiB', got {size!r}")
    if isinstance(size, int):
        if size < 0:
            raise ValueError(f"a size cannot be negative, got {size}")
        return size
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", str(size))
    if match is None or match.group(2).upper() not in _UNITS:
        raise ValueError(f"cannot read {size!r} as a size: use bytes or a string like '10GiB', '150MB'")
    return int(float(match.group(1)) * _UNITS[match.group(2).upper()])


def format_size(size: int) -> str:
    """A size for people: ``format_size(157286400)`` is '150.0 MiB'."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


def tensor_bytes(tensor: torch.Tensor, dtype: torch.dtype | None = None) -> int:
    """Bytes ``tensor`` takes, or would take in ``dtype`` (only floating tensors are converted)."""
    if dtype is not None and tensor.is_floating_point():
        return tensor.numel() * dtype.itemsize
    return tensor.numel() * tensor.element_size()


def module_sizes(model: torch.nn.Module, dtype: torch.dtype | None = None) -> dict[str, int]:
    """Bytes of every module's parameters and buffers (its submodules' included), by module name
    ("" is the whole model); tied parameters count once."""
    sizes: dict[str, int] = {}
    seen: set[int] = set()
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        size = tensor_bytes(tensor, dtype)
        parts = name.split(".")
        for depth in range(len(parts)):
            prefix = ".".join(parts[:depth])
            sizes[prefix] = sizes.get(prefix, 0) + size
    sizes.setdefault("", 0)
    return sizes
