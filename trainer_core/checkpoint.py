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

__all__ = ["atomic_save", "write_checkpoint", "publish_directory", "resolve_checkpoint"]


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
