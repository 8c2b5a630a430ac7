"""Saving and loading sharded models and their optimizers, in Hugging Face Accelerate's FSDP layout.

With ``state_dict_type="SHARDED_STATE_DICT"`` every rank writes its own shards through
``torch.distributed.checkpoint`` (``pytorch_model_fsdp_<i>/`` and ``optimizer_<i>/``, each a DCP
directory holding ``{"model": ...}`` / ``{"optimizer": ...}``): nothing is gathered, so a model too
big for one rank's memory is saved and resumed. With ``"FULL_STATE_DICT"`` the full weights and
optimizer state are gathered to rank 0 and written as ``pytorch_model_fsdp.bin`` and
``optimizer.bin`` (``pytorch_model_fsdp_1.bin``, ``optimizer_1.bin`` for the second, ...: Accelerate
numbers whole-state files from the second on); loading sends each rank its shards from rank 0. Every
rank calls these (collectives); ``checkpoint`` publishes the directory atomically afterwards.

Examples:
    >>> model_path("/ckpt", 0, "SHARDED_STATE_DICT"), model_path("/ckpt", 0, "FULL_STATE_DICT")
    ('/ckpt/pytorch_model_fsdp_0', '/ckpt/pytorch_model_fsdp.bin')
    >>> optimizer_path("/ckpt", 0, "FULL_STATE_DICT"), optimizer_path("/ckpt", 1, "FULL_STATE_DICT")
    ('/ckpt/optimizer.bin', '/ckpt/optimizer_1.bin')
"""

from __future__ import annotations

import os
from typing import Any

import torch

__all__ = ["save_sharded", "load_sharded", "model_path", "optimizer_path"]


def _path(directory: str, stem: str, index: int, kind: str) -> str:
    if kind == "SHARDED_STATE_DICT":
        return os.path.join(directory, f"{stem}_{index}")
    return os.path.join(directory, f"{stem}.bin" if index == 0 else f"{stem}_{index}.bin")


def model_path(directory: str, index: int, kind: str) -> str:
    """Where model ``index`` goes (Accelerate's names)."""
    return _path(directory, "pytorch_model_fsdp", index, kind)


def optimizer_path(directory: str, index: int, kind: str) -> str:
    """Where optimizer ``index`` goes (Accelerate's names)."""
    return _path(directory, "optimizer", index, kind)


def _readable(path: str, index: int) -> str:
    """``path``, or the ``_0`` name earlier trainer_core releases gave the first whole-state file."""
    stem, ending = os.path.splitext(path)
    older = f"{stem}_0{ending}"
    return older if index == 0 and not os.path.exists(path) and os.path.exists(older) else path


def _full(**extra: Any) -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, **extra)


def save_sharded(models: list, optimizers: list, directory: str, kind: str, is_main: bool) -> None:
    """Write every model and optimizer (``optimizers``: pairs of (model, torch optimizer))."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    for index, model in enumerate(models):
        if kind == "SHARDED_STATE_DICT":
            dcp.save({"model": get_model_state_dict(model)}, checkpoint_id=model_path(directory, index, kind))
        else:
            weights = get_model_state_dict(model, options=_full(cpu_offload=True))
            if is_main:
                torch.save(weights, model_path(directory, index, kind))
    for index, (model, optimizer) in enumerate(optimizers):
        if kind == "SHARDED_STATE_DICT":
            state = get_optimizer_state_dict(model, optimizer)
            dcp.save({"optimizer": state}, checkpoint_id=optimizer_path(directory, index, kind))
        else:
            state = get_optimizer_state_dict(model, optimizer, options=_full(cpu_offload=True))
            if is_main:
                torch.save(state, optimizer_path(directory, index, kind))


def load_sharded(models: list, optimizers: list, directory: str, kind: str, is_main: bool) -> None:
    """Read what ``save_sharded`` wrote into the (already sharded) models and optimizers."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    for index, model in enumerate(models):
        path = model_path(directory, index, kind)
        if kind == "SHARDED_STATE_DICT":
            holder_model: dict[str, Any] = {"model": get_model_state_dict(model)}
            dcp.load(holder_model, checkpoint_id=path)
            set_model_state_dict(model, holder_model["model"])
        else:
            weights = torch.load(_readable(path, index), weights_only=True) if is_main else {}
            set_model_state_dict(model, weights, options=_full(broadcast_from_rank0=True))
    for index, (model, optimizer) in enumerate(optimizers):
        path = optimizer_path(directory, index, kind)
        if kind == "SHARDED_STATE_DICT":
            holder: dict[str, Any] = {"optimizer": get_optimizer_state_dict(model, optimizer)}
            dcp.load(holder, checkpoint_id=path)
            set_optimizer_state_dict(model, optimizer, holder["optimizer"])
        else:
            state = torch.load(_readable(path, index), weights_only=True) if is_main else {}
            set_optimizer_state_dict(model, optimizer, state, options=_full(broadcast_from_rank0=True))
