"""Checkpoint files in the Hugging Face layout: sharded safetensors with an index, read one tensor at a time.

Written: ``model.safetensors`` when it fits in one shard, else ``model-00001-of-00004.safetensors``
... plus ``model.safetensors.index.json`` (``{"metadata": {"total_size": bytes}, "weight_map":
{tensor name: file}}``); with ``safe_serialization=False`` the same with ``pytorch_model*.bin``.
Transformers, Accelerate and this package read each other's files.

Read: a file, an index, or a folder holding either; tensors come one at a time (safetensors maps the
file and copies out only the tensor asked for), so loading never holds a whole shard.

Examples:
    >>> import tempfile, torch
    >>> folder = tempfile.mkdtemp()
    >>> state = {"a": torch.zeros(1000), "b": torch.ones(1000)}
    >>> save_sharded(state, folder, max_shard_size="5KB")
    ['model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors', 'model.safetensors.index.json']
    >>> sorted(name for name, _ in iter_tensors(folder))
    ['a', 'b']
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import torch

from .sizes import parse_size

__all__ = ["save_sharded", "checkpoint_files", "checkpoint_keys", "iter_tensors"]

SAFE = ("model.safetensors", "model.safetensors.index.json")
PICKLED = ("pytorch_model.bin", "pytorch_model.bin.index.json")


def save_sharded(
    state_dict: dict[str, torch.Tensor],
    directory: str | os.PathLike,
    max_shard_size: int | str = "1GB",
    safe_serialization: bool = True,
) -> list[str]:
    """Write ``state_dict`` into shards of at most ``max_shard_size`` (a bigger tensor gets a shard of
    its own) and, with several shards, the index; returns the file names written.

    Tensors sharing memory (tied weights) are written once, under their first name.
    """
    limit = parse_size(max_shard_size)
    os.makedirs(directory, exist_ok=True)
    weights, index_name = SAFE if safe_serialization else PICKLED
    shards: list[dict[str, torch.Tensor]] = [{}]
    filled, seen = 0, set()
    for name, tensor in state_dict.items():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape), tensor.dtype)
        if tensor.device.type != "meta" and key in seen:
            continue
        seen.add(key)
        size = tensor.numel() * tensor.element_size()
        if shards[-1] and filled + size > limit:
            shards.append({})
            filled = 0
        shards[-1][name] = tensor.detach().to("cpu").contiguous()
        filled += size
    stem, dot, extension = weights.partition(".")
    names = (
        [weights]
        if len(shards) == 1
        else [f"{stem}-{i:05d}-of-{len(shards):05d}{dot}{extension}" for i in range(1, len(shards) + 1)]
    )
    for name, shard in zip(names, shards, strict=True):
        _write(shard, os.path.join(directory, name), safe_serialization)
    if len(shards) == 1:
        return names
    index = {
        "metadata": {"total_size": sum(t.numel() * t.element_size() for s in shards for t in s.values())},
        "weight_map": {tensor: name for name, shard in zip(names, shards, strict=True) for tensor in shard},
    }
    with open(os.path.join(directory, index_name), "w") as file:
        json.dump(index, file, indent=2, sort_keys=True)
    return [*names, index_name]


def _write(shard: dict[str, torch.Tensor], path: str, safe: bool) -> None:
    partial = path + ".partial"
    if safe:
        from safetensors.torch import save_file

        save_file(shard, partial, metadata={"format": "pt"})
    else:
        torch.save(shard, partial)
    os.replace(partial, path)  # a reader never sees half a file


def checkpoint_files(checkpoint: str | os.PathLike) -> list[str]:
    """The weight files of ``checkpoint``: a weights file, an index JSON, or a folder with either.

    Raises:
        FileNotFoundError: nothing loadable there (the message says what was looked for).
    """
    path = os.fspath(checkpoint)
    if os.path.isdir(path):
        for name in (SAFE[1], SAFE[0], PICKLED[1], PICKLED[0]):
            if os.path.exists(os.path.join(path, name)):
                return checkpoint_files(os.path.join(path, name))
        found = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
        if len(found) == 1:
            return [os.path.join(path, found[0])]
        raise FileNotFoundError(f"no checkpoint in {path}: looked for {SAFE[1]}, {SAFE[0]}, {PICKLED[1]}, {PICKLED[0]}")
    if not os.path.exists(path):
        raise FileNotFoundError(f"no checkpoint at {path}")
    if path.endswith(".json"):
        with open(path) as file:
            weight_map = json.load(file)["weight_map"]
        folder = os.path.dirname(path)
        return [os.path.join(folder, name) for name in dict.fromkeys(weight_map.values())]
    return [path]


def checkpoint_keys(files: list[str]) -> list[str]:
    """Every tensor name in ``files`` (safetensors: read from the headers only)."""
    keys: list[str] = []
    for path in files:
        if path.endswith(".safetensors"):
            from safetensors import safe_open

            with safe_open(path, framework="pt") as file:
                keys.extend(file.keys())
        else:
            keys.extend(torch.load(path, map_location="cpu", mmap=True, weights_only=True))
    return keys


def iter_tensors(checkpoint: str | os.PathLike | list[str]) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, CPU tensor)`` for every tensor of ``checkpoint``, one at a time."""
    files = checkpoint if isinstance(checkpoint, list) else checkpoint_files(checkpoint)
    for path in files:
        if path.endswith(".safetensors"):
            from safetensors import safe_open

            with safe_open(path, framework="pt") as file:
                for name in file.keys():  # noqa: SIM118 (a safetensors handle, not a dict)
                    yield name, file.get_tensor(name)
        else:
            state = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
            yield from state.items()
            del state
