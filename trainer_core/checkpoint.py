"""Checkpoints written atomically: a crash mid-save never damages the previous checkpoint.

The main process writes everything into ``<dir>.tmp``, flushes it to disk, then swaps it in with
renames (``<dir>`` → ``<dir>.prev``, ``<dir>.tmp`` → ``<dir>``, remove ``<dir>.prev``). ``<dir>``
only ever names a complete checkpoint; if a crash falls between the two renames, loading finds the
previous one under ``<dir>.prev``.

Example (every rank calls both; the main process writes):
    >>> import tempfile
    >>> from trainer_core import Accelerator
    >>> accelerator = Accelerator(cpu=True)
    >>> model = accelerator.prepare(torch.nn.Linear(2, 2))
    >>> path = accelerator.save_state(os.path.join(tempfile.mkdtemp(), "ckpt"))
    >>> sorted(os.listdir(path))[:2]
    ['model_0.pt', 'random_states_0.pkl']
    >>> accelerator.load_state(path)     # model, optimizer, scheduler, RNG states, step
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from . import ops
from .seeding import restore_rng_states, rng_states

__all__ = [
    "CheckpointContext",
    "save_state",
    "load_state",
    "atomic_save",
    "write_checkpoint",
    "publish_directory",
    "resolve_checkpoint",
]


@dataclass(frozen=True)
class CheckpointContext:
    """What a checkpoint needs from the Accelerator besides its prepared objects."""

    state: Any  # the DistributedState
    scaler: Any  # the fp16 gradient scaler, or None
    step: int
    unwrap_model: Callable[[Any], Any]


def save_state(prepared, context, output_dir):
    """What ``Accelerator.save_state`` does: every rank calls it, the main process writes."""
    state = context.state
    rng_by_rank = ops.gather_object(state, [rng_states()])
    if state.is_main_process:
        parts = {f"model_{i}": context.unwrap_model(m).state_dict() for i, m in enumerate(prepared.models)}
        parts.update({f"optimizer_{i}": o.state_dict() for i, o in enumerate(prepared.optimizers)})
        parts.update({f"scheduler_{i}": s.state_dict() for i, s in enumerate(prepared.schedulers)})
        if context.scaler is not None:
            parts["scaler"] = context.scaler.state_dict()
        meta = {
            "step": context.step,
            "num_processes": state.num_processes,
            "dataloader_epochs": [loader.epoch for loader in prepared.dataloaders],
        }
        tmp = f"{output_dir}.tmp"
        if os.path.exists(tmp):
            shutil.rmtree(tmp)
        write_checkpoint(tmp, parts, rng_by_rank, meta, state.backend.save)
        publish_directory(tmp, output_dir)
    state.barrier()
    return output_dir


def load_state(prepared, context, input_dir):
    """What ``Accelerator.load_state`` does, on every rank; returns the step to continue from."""
    state = context.state
    directory = resolve_checkpoint(input_dir)
    location = state.backend.load_location(state.device)

    def load(name):
        return torch.load(os.path.join(directory, f"{name}.pt"), weights_only=False, map_location=location)

    for i, model in enumerate(prepared.models):
        context.unwrap_model(model).load_state_dict(load(f"model_{i}"))
    for i, optimizer in enumerate(prepared.optimizers):
        optimizer.load_state_dict(load(f"optimizer_{i}"))
    for i, scheduler in enumerate(prepared.schedulers):
        scheduler.load_state_dict(load(f"scheduler_{i}"))
    if context.scaler is not None:
        context.scaler.load_state_dict(load("scaler"))
    with open(os.path.join(directory, "state.json")) as file:
        meta = json.load(file)
    for loader, epoch in zip(prepared.dataloaders, meta["dataloader_epochs"], strict=False):
        loader.set_epoch(epoch)
    rng_file = os.path.join(directory, f"random_states_{state.process_index}.pkl")
    if os.path.exists(rng_file):
        with open(rng_file, "rb") as rng:
            restore_rng_states(pickle.load(rng))
    state.barrier()
    return meta["step"]


def atomic_save(obj, path, save=torch.save):
    """``save`` (``torch.save``, or the backend's) to ``path.tmp``, fsync, then rename over ``path``."""
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as file:
        save(obj, file)
        file.flush()
        os.fsync(file.fileno())
    os.replace(tmp, path)


def write_checkpoint(directory, parts, rng_by_rank, meta, save=torch.save):
    """Write a checkpoint into ``directory`` (which must not exist yet)."""
    os.makedirs(directory)
    for name, state in parts.items():
        with open(os.path.join(directory, f"{name}.pt"), "wb") as file:
            save(state, file)
            file.flush()
            os.fsync(file.fileno())
    for rank, states in enumerate(rng_by_rank):
        with open(os.path.join(directory, f"random_states_{rank}.pkl"), "wb") as file:
            pickle.dump(states, file)
            file.flush()
            os.fsync(file.fileno())
    with open(os.path.join(directory, "state.json"), "w") as file:
        json.dump(meta, file)
        file.flush()
        os.fsync(file.fileno())


def publish_directory(tmp, final):
    """Swap ``tmp`` in as ``final``, keeping ``final`` complete at every instant."""
    previous = f"{final}.prev"
    if os.path.exists(previous):
        shutil.rmtree(previous)
    if os.path.exists(final):
        os.rename(final, previous)
    os.rename(tmp, final)
    shutil.rmtree(previous, ignore_errors=True)
    _fsync_dir(os.path.dirname(os.path.abspath(final)))


def resolve_checkpoint(directory):
    """The complete checkpoint for ``directory`` (``<dir>`` or, after a crash mid-swap, ``<dir>.prev``)."""
    for candidate in (directory, f"{directory}.prev"):
        if os.path.isfile(os.path.join(candidate, "state.json")):
            return candidate
    raise FileNotFoundError(f"no complete checkpoint at {directory!r}")


def _fsync_dir(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
