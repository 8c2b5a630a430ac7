"""Checkpoints written atomically: a crash mid-save never damages the previous checkpoint.

The main process writes everything into ``<dir>.tmp``, flushes it to disk, then swaps it in with
renames (``<dir>`` → ``<dir>.prev``, ``<dir>.tmp`` → ``<dir>``, remove ``<dir>.prev``). ``<dir>``
only ever names a complete checkpoint; if a crash falls between the two renames, loading finds the
previous one under ``<dir>.prev``.

Example:
    >>> accelerator.save_state("ckpt")   # every rank calls it; rank 0 writes
    >>> accelerator.load_state("ckpt")   # every rank restores model, optimizer, RNG, step
"""

from __future__ import annotations

import json
import os
import pickle
import shutil

import torch

from . import ops
from .seeding import restore_rng_states, rng_states

__all__ = ["save_state", "load_state", "atomic_save", "write_checkpoint", "publish_directory", "resolve_checkpoint"]


def save_state(accelerator, output_dir):
    """What ``Accelerator.save_state`` does: every rank calls it, the main process writes."""
    rng_by_rank = ops.gather_object(accelerator.state, [rng_states()])
    if accelerator.is_main_process:
        parts = {f"model_{i}": accelerator.unwrap_model(m).state_dict() for i, m in enumerate(accelerator._models)}
        parts.update({f"optimizer_{i}": o.state_dict() for i, o in enumerate(accelerator._optimizers)})
        parts.update({f"scheduler_{i}": s.state_dict() for i, s in enumerate(accelerator._schedulers)})
        if accelerator.scaler is not None:
            parts["scaler"] = accelerator.scaler.state_dict()
        meta = {"step": accelerator.step, "num_processes": accelerator.num_processes,
                "dataloader_epochs": [loader.epoch for loader in accelerator._dataloaders]}
        tmp = f"{output_dir}.tmp"
        if os.path.exists(tmp):
            shutil.rmtree(tmp)
        write_checkpoint(tmp, parts, rng_by_rank, meta, accelerator.state.backend.save)
        publish_directory(tmp, output_dir)
    accelerator.wait_for_everyone()
    return output_dir


def load_state(accelerator, input_dir):
    """What ``Accelerator.load_state`` does, on every rank."""
    directory = resolve_checkpoint(input_dir)
    location = accelerator.state.backend.load_location(accelerator.device)

    def load(name):
        return torch.load(os.path.join(directory, f"{name}.pt"), weights_only=False, map_location=location)

    for i, model in enumerate(accelerator._models):
        accelerator.unwrap_model(model).load_state_dict(load(f"model_{i}"))
    for i, optimizer in enumerate(accelerator._optimizers):
        optimizer.load_state_dict(load(f"optimizer_{i}"))
    for i, scheduler in enumerate(accelerator._schedulers):
        scheduler.load_state_dict(load(f"scheduler_{i}"))
    if accelerator.scaler is not None:
        accelerator.scaler.load_state_dict(load("scaler"))
    with open(os.path.join(directory, "state.json")) as file:
        meta = json.load(file)
    accelerator.step = meta["step"]
    for loader, epoch in zip(accelerator._dataloaders, meta["dataloader_epochs"]):
        loader.set_epoch(epoch)
    rng_file = os.path.join(directory, f"random_states_{accelerator.process_index}.pkl")
    if os.path.exists(rng_file):
        with open(rng_file, "rb") as file:
            restore_rng_states(pickle.load(file))
    accelerator.wait_for_everyone()


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
