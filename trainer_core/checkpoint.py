"""``save_state`` / ``load_state``: checkpoints in Hugging Face Accelerate's layout, written atomically.

The files are Accelerate's, with its names, so a run can move between the two libraries:
``model.safetensors`` (``model_1.safetensors``, ...; ``pytorch_model.bin`` without safetensors),
``optimizer.bin``, ``scheduler.bin``, ``scaler.pt``, ``random_states_<rank>.pkl`` (the step and
every rank's RNG states), ``custom_checkpoint_<i>.pkl`` (objects registered for checkpointing).
``notebook_launcher_state.json`` adds what Accelerate keeps elsewhere (the data loaders' epochs).

The main process writes everything (the ranks' RNG states are gathered to it) into a temporary
directory that is then published atomically (``atomic``): a crash at any moment, even a second
one right after the first, leaves a complete checkpoint that ``load_state`` finds.

Example (every rank calls both; the main process writes):
    >>> import tempfile
    >>> from trainer_core import Accelerator
    >>> accelerator = Accelerator(cpu=True)
    >>> model = accelerator.prepare(torch.nn.Linear(2, 2))
    >>> path = accelerator.save_state(os.path.join(tempfile.mkdtemp(), "ckpt"))
    >>> sorted(name for name in os.listdir(path) if name != "COMPLETE")
    ['model.safetensors', 'notebook_launcher_state.json', 'random_states_0.pkl']
    >>> accelerator.load_state(path) == path     # model, optimizer, scheduler, RNG states, step
    True
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from . import atomic, ops

__all__ = ["CheckpointContext", "CheckpointNotWritten", "save_state", "load_state", "atomic_save", "model_file_names"]


class CheckpointNotWritten(OSError):
    """``save_state`` could not write its files (a full disk, a quota, a file size limit). Nothing
    was published: the folder is as it was, and the unfinished copy has been removed (unless the
    message says the save was cut short while replacing the previous checkpoint, which then stays
    the one ``load_state`` finds)."""


_EXTRA = "notebook_launcher_state.json"


@dataclass(frozen=True)
class CheckpointContext:
    """What a checkpoint needs from the Accelerator besides its prepared objects."""

    state: Any  # the DistributedState
    precision: Any  # the precision object: its state_dict() (the fp16 scaler's) is kept, if any
    step: int
    unwrap_model: Callable[[Any], Any]
    safe_serialization: bool = True
    stateful_dataloaders: bool = False  # restore each loader's position in its epoch on load
    strategy: Any = None  # a strategy that keeps models in shards writes and reads them itself


def _numbered(name: str, index: int) -> str:
    """Accelerate's numbering: ``optimizer.bin``, ``optimizer_1.bin``, ..."""
    stem, dot, ending = name.partition(".")
    return name if index == 0 else f"{stem}_{index}{dot}{ending}"


def model_file_names(index: int) -> tuple[str, str]:
    """(safetensors name, pickle name) of the ``index``-th model."""
    return _numbered("model.safetensors", index), _numbered("pytorch_model.bin", index)


def _rng_states(step: int) -> dict:
    states = {"step": step, "random_state": random.getstate(), "torch_manual_seed": torch.get_rng_state()}
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        states["numpy_random_seed"] = numpy.random.get_state()
    if torch.cuda.is_initialized():
        states["torch_cuda_manual_seed"] = torch.cuda.get_rng_state_all()
    return states


def _restore_rng_states(states: dict) -> None:
    random.setstate(states["random_state"])
    torch.set_rng_state(states["torch_manual_seed"])
    if "numpy_random_seed" in states:
        import numpy

        numpy.random.set_state(states["numpy_random_seed"])
    if "torch_cuda_manual_seed" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["torch_cuda_manual_seed"])


def save_state(prepared, context, output_dir):
    """What ``Accelerator.save_state`` does: every rank calls it, the main process writes."""
    state = context.state
    rng_by_rank = ops.gather_object(state, [_rng_states(context.step)])
    tmp = atomic.begin(output_dir) if state.is_main_process else None
    if state.distributed:  # every rank writes its shards of a sharded model into the same directory
        tmp = ops.broadcast_object(state, tmp)
    sharded = context.strategy is not None and context.strategy.save_training_state(
        prepared.models, prepared.optimizers, tmp
    )
    if state.is_main_process:
        assert tmp is not None
        try:
            _write(tmp, prepared, context, rng_by_rank, whole_models=not sharded)
        except Exception as err:  # torch, safetensors and json each say "disk full" their own way
            atomic.abandon(tmp)
            raise _not_written(output_dir, err) from None
        try:
            atomic.publish(tmp, output_dir)
        except FileExistsError:  # a refusal: it names what is in the way
            raise
        except atomic.PartlyPublished as err:
            raise _not_written(output_dir, err, _PARTLY) from None
        except OSError as err:
            raise _not_written(output_dir, err) from None
    state.barrier()
    return output_dir


_NOTHING = "Nothing was published: the folder is as it was, and the unfinished copy was removed"
_PARTLY = (
    "It was cut short while replacing the previous checkpoint, which load_state still finds"
    " (in the folder's .prev copy); the next save_state finishes the job"
)


def _not_written(output_dir: str, err: BaseException, outcome: str = _NOTHING) -> CheckpointNotWritten:
    """One error that says what happened, instead of a serializer's own (torch's "enforce fail …
    unexpected pos") chained to the OSError under it."""
    cause: BaseException | None = err
    while cause is not None and not isinstance(cause, OSError):
        cause = cause.__cause__ or cause.__context__
    if not isinstance(cause, OSError):  # safetensors (Rust) names the system error in its text
        found = re.search(r"(?:code: |os error )(\d+)", str(err))
        cause = OSError(int(found.group(1)), os.strerror(int(found.group(1)))) if found else None
    why = cause.strerror if isinstance(cause, OSError) and cause.strerror else str(err).strip().splitlines()[0]
    try:
        free = f"{shutil.disk_usage(os.path.dirname(os.path.abspath(output_dir))).free / 2**20:.1f} MiB free there"
    except OSError:
        free = "free space unknown"
    error = CheckpointNotWritten(
        f"save_state could not write the checkpoint for {output_dir} ({why}; {free}). {outcome}"
    )
    error.errno = cause.errno if isinstance(cause, OSError) else None
    return error


def _write(directory, prepared, context, rng_by_rank, whole_models=True):
    save = context.state.backend.save
    if whole_models:
        _write_models(directory, prepared, context, save)
    for i, scheduler in enumerate(prepared.schedulers):
        _save(save, scheduler.state_dict(), os.path.join(directory, _numbered("scheduler.bin", i)))
    precision_state = context.precision.state_dict()
    if precision_state is not None:
        _save(torch.save, precision_state, os.path.join(directory, "scaler.pt"))
    for i, obj in enumerate(prepared.custom):
        _save(save, obj.state_dict(), os.path.join(directory, f"custom_checkpoint_{i}.pkl"))
    for rank, states in enumerate(rng_by_rank):
        _save(torch.save, states, os.path.join(directory, f"random_states_{rank}.pkl"))
    extra = {
        "step": context.step,
        "num_processes": context.state.num_processes,
        "dataloader_epochs": [loader.epoch for loader in prepared.dataloaders],
        "dataloader_positions": [loader.state_dict() for loader in prepared.dataloaders],
    }
    with open(os.path.join(directory, _EXTRA), "w") as file:
        json.dump(extra, file)


def _write_models(directory, prepared, context, save):
    """Whole models and optimizers, from the main process."""
    for i, model in enumerate(prepared.models):
        unwrapped = context.unwrap_model(model)
        safe_name, pickle_name = model_file_names(i)
        if context.safe_serialization:
            from safetensors.torch import save_model

            save_model(_on_cpu(unwrapped), os.path.join(directory, safe_name), metadata={"format": "pt"})
        else:
            _save(save, unwrapped.state_dict(), os.path.join(directory, pickle_name))
    for i, optimizer in enumerate(prepared.optimizers):
        _save(save, optimizer.state_dict(), os.path.join(directory, _numbered("optimizer.bin", i)))


def _on_cpu(model):
    """safetensors writes CPU tensors: a model elsewhere is copied to the CPU for writing only."""
    if all(t.device.type == "cpu" for t in model.state_dict().values()):
        return model
    import copy

    return copy.deepcopy(model).to("cpu")


def _save(save, obj, path):
    with open(path, "wb") as file:
        save(obj, file)


def load_state(prepared, context, input_dir, load_kwargs=None, model_kwargs=None):
    """What ``Accelerator.load_state`` does, on every rank; returns the step to continue from.

    Reads checkpoints written by this module or by Hugging Face Accelerate. ``load_kwargs`` go to
    each ``torch.load``, ``model_kwargs`` (``strict=False``) to each model's ``load_state_dict``.
    """
    state = context.state
    directory = _resolve(input_dir)
    location = state.backend.load_location(state.device)

    def load(name, map_location=location):
        options = {"weights_only": False, "map_location": map_location, **(load_kwargs or {})}
        return torch.load(os.path.join(directory, name), **options)

    _load_objects(prepared, context, directory, load, model_kwargs or {})
    step = _restore_rank_state(directory, state.process_index)
    step = _load_extra(prepared, context, directory, step)
    state.barrier()
    return step


def _load_objects(prepared, context, directory, load, model_kwargs):
    """Models, optimizers, schedulers, the precision's state and registered objects."""
    sharded = context.strategy is not None and context.strategy.load_training_state(
        prepared.models, prepared.optimizers, directory
    )
    if sharded and model_kwargs:
        raise ValueError(f"load_state({', '.join(model_kwargs)}=...) is for whole models, not sharded ones")
    if not sharded:
        _load_models(prepared, context, directory, load, model_kwargs)
    for i, scheduler in enumerate(prepared.schedulers):
        scheduler.load_state_dict(load(_numbered("scheduler.bin", i)))
    if context.precision.state_dict() is not None and os.path.exists(os.path.join(directory, "scaler.pt")):
        context.precision.load_state_dict(load("scaler.pt"))
    for i, obj in enumerate(prepared.custom):
        obj.load_state_dict(load(f"custom_checkpoint_{i}.pkl", "cpu"))


def _load_models(prepared, context, directory, load, model_kwargs):
    """Whole models and optimizers, on every rank."""
    for i, model in enumerate(prepared.models):
        safe_name, pickle_name = model_file_names(i)
        unwrapped = context.unwrap_model(model)
        if os.path.exists(os.path.join(directory, safe_name)):
            _load_safetensors(unwrapped, os.path.join(directory, safe_name), **model_kwargs)
        else:
            unwrapped.load_state_dict(load(pickle_name), **model_kwargs)
    for i, optimizer in enumerate(prepared.optimizers):
        optimizer.load_state_dict(load(_numbered("optimizer.bin", i)))


def _load_extra(prepared, context, directory, step):
    """The loaders' epochs (and positions, for stateful loaders) and the step; returns the step."""
    extra_path = os.path.join(directory, _EXTRA)
    if not os.path.exists(extra_path):
        return step
    with open(extra_path) as file:
        extra = json.load(file)
    for loader, epoch in zip(prepared.dataloaders, extra.get("dataloader_epochs", []), strict=False):
        loader.set_epoch(epoch)
    for loader, position in zip(prepared.dataloaders, extra.get("dataloader_positions", []), strict=False):
        # stateful: back where each loader was in its epoch; else only the epoch's shuffle comes back
        (loader.load_state_dict if context.stateful_dataloaders else loader.load_shuffle)(position)
    return extra.get("step", step)


def _restore_rank_state(directory, process_index):
    path = os.path.join(directory, f"random_states_{process_index}.pkl")
    if not os.path.exists(path):
        return 0
    states = torch.load(path, weights_only=False)
    _restore_rng_states(states)
    return states.get("step", 0)


def _load_safetensors(model, path, strict=True):
    """Load a safetensors model file into ``model`` on any device (XLA tensors included: they have no
    host pointer for safetensors' own ``load_model`` to check). A tied weight is saved once, under
    one of its names; the others are its aliases, not missing. ``strict=False`` allows the rest."""
    from safetensors.torch import load_file

    from .big_modeling.dispatch import tied_groups

    missing, unexpected = model.load_state_dict(load_file(path), strict=False)
    loaded_through_alias = {
        name for group in tied_groups(model) if any(other not in missing for other in group) for name in group
    }
    missing = [name for name in missing if name not in loaded_through_alias]
    if strict and (missing or unexpected):
        raise RuntimeError(
            f"{os.path.basename(path)} does not match the model: missing {missing}, unexpected {unexpected}"
        )


def _resolve(input_dir):
    """A complete checkpoint: ours (possibly ``.prev``/``.tmp`` after a crash) or Accelerate's (no marker)."""
    try:
        return atomic.resolve(input_dir)
    except FileNotFoundError:
        if os.path.isdir(input_dir) and any(name.startswith("random_states_") for name in os.listdir(input_dir)):
            return input_dir  # written by Hugging Face Accelerate
        raise


def atomic_save(obj, path, save=torch.save):
    """``save`` (``torch.save``, or the backend's) to ``path.tmp``, fsync, then rename over ``path``."""
    atomic.atomic_file(path, lambda file: save(obj, file))
