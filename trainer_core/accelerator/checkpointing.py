"""What the Accelerator offers for saving and restoring: models, the full training state, hooks.

``Accelerator`` inherits these methods; what a strategy keeps in its own form (a wrapped model's
state dict) is asked of ``self.strategy``; the files are written by ``checkpoint``.

Examples:
    >>> import os, tempfile, torch
    >>> from trainer_core import Accelerator
    >>> accelerator = Accelerator(cpu=True)
    >>> model = accelerator.prepare(torch.nn.Linear(2, 2))
    >>> folder = accelerator.save_state(tempfile.mkdtemp())
    >>> accelerator.load_state(folder) == folder
    True
"""

from __future__ import annotations

import collections
import os
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.hooks import RemovableHandle

from .. import checkpoint, compiling, ops, project
from ..precision import FullPrecision
from ..prepared import PreparedObjects
from ..project import ProjectConfiguration
from ..strategies.base import Strategy
from .process_helpers import ProcessHelpers

__all__ = ["CheckpointMethods"]


class CheckpointMethods(ProcessHelpers):
    """Saving and loading models and the training state, with hooks around them."""

    strategy: Strategy
    precision: FullPrecision
    prepared: PreparedObjects
    project_configuration: ProjectConfiguration
    dataloader_config: Any
    step: int
    _save_hooks: collections.OrderedDict
    _load_hooks: collections.OrderedDict

    # -- hooks around checkpoints ------------------------------------------------------------------

    def register_save_state_pre_hook(self, hook: Callable) -> RemovableHandle:
        """Call ``hook(models, weights, output_dir)`` before ``save_state`` writes; returns a handle
        whose ``remove()`` unregisters it."""
        handle = RemovableHandle(self._save_hooks)
        self._save_hooks[handle.id] = hook
        return handle

    def register_load_state_pre_hook(self, hook: Callable) -> RemovableHandle:
        """Call ``hook(models, input_dir)`` before ``load_state`` reads; returns a removable handle."""
        handle = RemovableHandle(self._load_hooks)
        self._load_hooks[handle.id] = hook
        return handle

    # -- models and checkpoints ------------------------------------------------------------------

    def unwrap_model(
        self, model: torch.nn.Module, keep_fp32_wrapper: bool = True, keep_torch_compile: bool = True
    ) -> torch.nn.Module:
        """The user's module: without DDP, and (``keep_fp32_wrapper=False``) without the autocast
        forward, and (``keep_torch_compile=False``) without ``torch.compile``'s wrapper (with it, the
        compiled wrapper is pointed at the user's module and returned, as Accelerate does)."""
        rewrap, model = compiling.unwrap(model)
        if not keep_fp32_wrapper and "forward" in vars(model):
            del model.forward
        model = self.strategy.unwrap(model)
        return rewrap(model) if keep_torch_compile else model

    def get_state_dict(self, model: torch.nn.Module, unwrap: bool = True) -> dict:
        """The model's state dict (of the user's module with ``unwrap``, else of the DDP wrapper)."""
        model = compiling.unwrap(model)[1]  # a compiled model's names are its module's
        return self.strategy.module_state_dict(model) if unwrap else model.state_dict()

    def save(self, obj: Any, f: str | os.PathLike, safe_serialization: bool = False) -> None:
        """``torch.save`` on the main process only, atomically (temp file + rename); with
        ``safe_serialization``, a safetensors file of ``obj``, a dict of tensors."""
        if self.is_main_process:
            checkpoint.atomic_save(obj, f, _safetensors_save if safe_serialization else self.state.backend.save)
        self.wait_for_everyone()

    def save_model(
        self,
        model: torch.nn.Module,
        save_directory: str | os.PathLike,
        max_shard_size: int | str = "1GB",
        safe_serialization: bool = True,
    ) -> list[str]:
        """Write the model's weights for inference, in the Hugging Face layout (``model.safetensors``,
        or shards of at most ``max_shard_size`` plus ``model.safetensors.index.json``; ``pytorch_model*.bin``
        without ``safe_serialization``), from the main process; returns the file names.

        Load them with ``trainer_core.big_modeling.load_checkpoint_and_dispatch`` (or Accelerate's,
        or Transformers' ``from_pretrained``).

        Examples:
            >>> import os, tempfile
            >>> from trainer_core import Accelerator
            >>> folder = tempfile.mkdtemp()
            >>> Accelerator(cpu=True).save_model(torch.nn.Linear(2, 2), folder)
            ['model.safetensors']
        """
        from ..big_modeling.files import save_sharded

        names = []
        weights = self.get_state_dict(model)  # every rank: gathering a sharded model's weights is a collective
        if self.is_main_process:
            names = save_sharded(weights, save_directory, max_shard_size, safe_serialization)
        self.wait_for_everyone()
        return names

    def save_state(self, output_dir: str | os.PathLike | None = None, safe_serialization: bool = True) -> str:
        """Save models, optimizers, schedulers, scaler, registered objects, every rank's RNG state and the
        step, atomically, in Hugging Face Accelerate's layout; returns the directory.

        With no ``output_dir``, the next numbered checkpoint of the project (``project_dir``), keeping
        the last ``total_limit``.

        Examples:
            >>> import tempfile
            >>> from trainer_core import Accelerator
            >>> accelerator = Accelerator(cpu=True, project_dir=tempfile.mkdtemp())
            >>> model = accelerator.prepare(torch.nn.Linear(2, 2))
            >>> os.path.basename(accelerator.save_state()), os.path.basename(accelerator.save_state())
            ('checkpoint_0', 'checkpoint_1')
        """
        config = self.project_configuration
        automatic = output_dir is None
        if automatic:
            if not config.automatic_checkpoint_naming:
                raise ValueError(
                    "save_state() needs a directory, or Accelerator(project_dir=...) for numbered checkpoints"
                )
            output_dir = project.next_checkpoint(config) if self.is_main_process else None
            if self.is_main_process:
                os.makedirs(config.checkpoints_dir, exist_ok=True)
            if self.state.distributed:  # the main process's choice (other nodes may not see its folder)
                output_dir = ops.broadcast_object(self.state, output_dir)
                config.iteration = int(os.path.basename(output_dir).split("_")[-1])
        context = self._checkpoint_context(safe_serialization)
        models = [self.unwrap_model(model) for model in self.prepared.models]
        for hook in self._save_hooks.values():
            hook(models, [model.state_dict() for model in models], output_dir)
        saved = checkpoint.save_state(self.prepared, context, output_dir)
        if automatic:
            config.iteration += 1
            if self.is_main_process:
                project.prune_checkpoints(config, keep=saved)
        return saved

    def load_state(
        self,
        input_dir: str | os.PathLike | None = None,
        load_kwargs: dict | None = None,
        **load_model_func_kwargs: Any,
    ) -> str | os.PathLike | None:
        """Restore what ``save_state`` (or Hugging Face Accelerate's) wrote, on every rank; returns the
        directory loaded.

        With no ``input_dir``, the project's newest complete checkpoint — or nothing (None) when
        there is none yet, so a training function can begin with ``accelerator.load_state()`` and
        resume after a restart. As in Accelerate, ``load_kwargs`` go to ``torch.load`` and the other
        keywords to each model's ``load_state_dict`` (``strict=False`` for a model that changed).
        """
        config = self.project_configuration
        if input_dir is None:
            if not config.automatic_checkpoint_naming:
                raise ValueError("load_state() needs a directory, or Accelerator(project_dir=...)")
            input_dir = project.latest_checkpoint(config)
            if input_dir is None:
                return None
            config.iteration = int(os.path.basename(input_dir).split("_")[-1]) + 1
        for hook in self._load_hooks.values():
            hook([self.unwrap_model(model) for model in self.prepared.models], input_dir)
        context = self._checkpoint_context()
        self.step = checkpoint.load_state(self.prepared, context, input_dir, load_kwargs, load_model_func_kwargs)
        return input_dir

    def register_for_checkpointing(self, *objects: Any) -> None:
        """Save and restore ``objects`` (anything with ``state_dict``/``load_state_dict``) with the state."""
        missing = [obj for obj in objects if not (hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict"))]
        if missing:
            raise ValueError(
                f"objects registered for checkpointing need state_dict() and load_state_dict(); "
                f"these have not: {', '.join(type(obj).__name__ for obj in missing)}"
            )
        self.prepared.custom.extend(objects)

    def skip_first_batches(self, dataloader: Any, num_batches: int = 0) -> Any:
        """The prepared ``dataloader``, starting ``num_batches`` into its next epoch (resume mid-epoch).

        Example (resuming at step 7 of an epoch of 10 batches)::

            for batch in accelerator.skip_first_batches(train_dl, 7):   # batches 7, 8, 9
                ...
        """
        return dataloader.skip(num_batches)

    def _checkpoint_context(self, safe_serialization: bool = True) -> checkpoint.CheckpointContext:
        return checkpoint.CheckpointContext(
            self.state,
            self.precision,
            self.step,
            lambda model: self.unwrap_model(model, keep_torch_compile=False),  # the names of an uncompiled model
            safe_serialization,
            stateful_dataloaders=bool(getattr(self.dataloader_config, "use_stateful_dataloader", False)),
            strategy=self.strategy,
        )


def _safetensors_save(obj: Any, file: Any) -> None:
    """Write a dict of tensors as safetensors to an open binary ``file``."""
    from safetensors.torch import save

    if not isinstance(obj, dict) or not all(isinstance(value, torch.Tensor) for value in obj.values()):
        raise TypeError("save(..., safe_serialization=True) writes a dict of tensors (a state dict)")
    file.write(save({name: tensor.detach().cpu().contiguous() for name, tensor in obj.items()}, {"format": "pt"}))
