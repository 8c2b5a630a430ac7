"""What the Accelerator's ``prepare`` does: each object made ready for the rank's strategy and device.

``Accelerator`` inherits these methods. Models are moved and wrapped by the strategy (DDP, FSDP2,
DeepSpeed) with forward under the precision's autocast, optimizers step through the precision,
loaders shard by the data-parallel coordinate, schedulers step with the optimizers.

Examples:
    >>> import torch
    >>> from torch.utils.data import DataLoader
    >>> from trainer_core import Accelerator
    >>> accelerator = Accelerator(cpu=True)
    >>> model, loader = accelerator.prepare(torch.nn.Linear(2, 1), DataLoader(list(range(10)), batch_size=4))
    >>> len(loader)
    3
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch.optim.lr_scheduler import LRScheduler
from torch.utils.data import DataLoader

from .. import ops
from ..compat.shuffle import SamplerShuffle, draw_seed, plain_random_sampler
from ..data import PreparedDataLoader
from ..optim import PreparedOptimizer, PreparedScheduler
from ..precision import autocast_forward
from ..strategies import PrepareSettings
from ..strategies.deepspeed.placeholders import is_placeholder_optimizer, is_placeholder_scheduler

__all__ = ["PrepareMethods"]


class PrepareMethods:
    """``prepare`` and its per-kind steps, in Accelerate's names and keywords."""

    strategy: Any
    precision: Any
    prepared: Any
    state: Any
    device: torch.device
    dataloader_config: Any
    gradient_accumulation_steps: int
    step_scheduler_with_optimizer: bool
    num_processes: int
    _data_state: Any
    _mesh: Any
    _dynamo: Any  # the DynamoSettings prepare compiles with (``trainer_core.compiling``)
    _throughput: Any  # the rank's pace meter (``trainer_core.throughput``)

    def prepare(self, *objects: Any, device_placement: list[bool] | None = None) -> Any:
        """Prepare models, optimizers, data loaders and schedulers; return them in the same order.

        ``device_placement`` (one bool per object, as in Accelerate): False is accepted where the
        rank's device is the CPU (where the objects are) and refused elsewhere, since trainer_core
        places every prepared object on the rank's device.

        Examples:
            >>> from trainer_core import Accelerator
            >>> accelerator = Accelerator(cpu=True)
            >>> model = torch.nn.Linear(2, 1)
            >>> optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            >>> train_dl = DataLoader(list(range(10)), batch_size=4)
            >>> model, optimizer, train_dl = accelerator.prepare(model, optimizer, train_dl)
            >>> len(train_dl)
            3
        """
        if device_placement is not None and len(device_placement) != len(objects):
            raise ValueError(
                f"device_placement has {len(device_placement)} entries for {len(objects)} objects: give one per object"
            )
        self._check_placement(*(device_placement or ()))
        settings = PrepareSettings(
            self.gradient_accumulation_steps, self.precision.name, self.dataloader_config.split_batches
        )
        objects = tuple(self.strategy.prepare_together(objects, settings))
        _refuse_placeholders(objects)
        first = [obj if isinstance(obj, LRScheduler) else self._prepare_one(obj) for obj in objects]
        prepared = [self.prepare_scheduler(obj) if isinstance(obj, LRScheduler) else obj for obj in first]
        return prepared[0] if len(prepared) == 1 else tuple(prepared)

    def _prepare_one(self, obj: Any) -> Any:
        if isinstance(obj, (PreparedOptimizer, PreparedDataLoader)):  # prepared already (they pass isinstance)
            return obj
        if isinstance(obj, torch.nn.Module):
            return self.prepare_model(obj)
        if isinstance(obj, torch.optim.Optimizer):
            return self.prepare_optimizer(obj)
        if isinstance(obj, DataLoader):
            return self.prepare_data_loader(obj)
        return obj

    def prepare_model(
        self, model: torch.nn.Module, device_placement: bool | None = None, evaluation_mode: bool = False
    ) -> torch.nn.Module:
        """Move to the device, wrap as the strategy says (DDP when distributed), run forward under the
        precision's autocast. With ``evaluation_mode`` (as Accelerate: a model only evaluated), the
        model is moved but not wrapped, so its forward passes need no peers.

        Moving to some devices (XLA) replaces the parameter objects; optimizers made before are
        pointed at the new ones when they are prepared (before or after the model).
        """
        self._check_placement(device_placement)
        if evaluation_mode and self.strategy.shards_state:
            raise ValueError("prepare_model(evaluation_mode=True) is for whole models, not FSDP or DeepSpeed ones")
        before = dict(self.strategy.unwrap(model).named_parameters())
        model = model.to(self.device) if evaluation_mode else self.strategy.setup_module(model)
        self.prepared.note_moved(before, dict(self.strategy.unwrap(model).named_parameters()))
        if self.precision.name != "no":
            model.forward = autocast_forward(model.forward, self.precision)
        model = self.strategy.compile(model, self._dynamo)  # last, as Accelerate compiles
        if not evaluation_mode:
            self._throughput.watch(model)  # the first step's FLOPs, for MFU
        self.prepared.models.append(model)
        return model

    def prepare_optimizer(self, optimizer: torch.optim.Optimizer, device_placement: bool | None = None) -> Any:
        """The optimizer, stepping through the precision (and the strategy: DeepSpeed's engine)."""
        self._check_placement(device_placement)
        prepared = PreparedOptimizer(self.strategy.setup_optimizer(optimizer), self)
        prepared.rebind(self.prepared.moved)
        self.prepared.optimizers.append(prepared)
        return prepared

    def prepare_scheduler(self, scheduler: LRScheduler) -> Any:
        """The scheduler, stepped with its optimizers (once per process per step, as Accelerate)."""
        if not self.step_scheduler_with_optimizer:
            per_step = 0  # every call steps it, once
        else:
            per_step = 1 if self.dataloader_config.split_batches else self.num_processes
        prepared = PreparedScheduler(scheduler, self.prepared.optimizers, per_step)
        self.prepared.schedulers.append(prepared)
        return prepared

    def prepare_data_loader(
        self, data_loader: DataLoader, device_placement: bool | None = None, slice_fn_for_dispatch: Any = None
    ) -> Any:
        """This rank's share of the loader's batches, in an order every rank agrees on."""
        self._check_placement(device_placement)
        if slice_fn_for_dispatch is not None:
            raise NotImplementedError(
                "slice_fn_for_dispatch: trainer_core does not dispatch batches from rank 0 (every rank loads "
                "the batches it would have been sent), so there is nothing to slice"
            )
        loader = data_loader
        config = self.dataloader_config
        seed = config.data_seed if config.data_seed is not None else torch.initial_seed() % 2**31
        seed = ops.broadcast_object(self.state, seed)
        index, count = self.strategy.data_shard()  # a tensor-parallel group shares its batches
        state = dataclasses.replace(self.state, process_index=index, num_processes=count)
        shuffle = self._accelerate_shuffle(loader, several=state.num_processes > 1)
        prepared = PreparedDataLoader(
            loader, state, self._data_state, seed, config.split_batches, config.even_batches, shuffle
        )
        self.prepared.dataloaders.append(prepared)
        return prepared

    def _accelerate_shuffle(self, loader: DataLoader, several: bool) -> SamplerShuffle | None:
        """Accelerate's shuffle for the loader's plain ``RandomSampler`` (``compat.shuffle``), unless a
        seeded order is asked for (or batches are dispatched); with several processes its seed is
        drawn here from the global RNG, rank 0's draw for all, as Accelerate draws it."""
        config = self.dataloader_config
        sampler = plain_random_sampler(loader)
        if sampler is None or config.data_seed is not None or config.use_seedable_sampler:
            return None
        if several and config.dispatch_batches:
            return None
        return SamplerShuffle(sampler, ops.broadcast_object(self.state, draw_seed()) if several else None)

    def _check_placement(self, *placements: bool | None) -> None:
        """Refuse ``device_placement=False`` where placing matters (the rank's device is not the CPU)."""
        if any(placement is False for placement in placements) and self.device.type != "cpu":
            raise NotImplementedError(
                f"device_placement=False: trainer_core places every prepared object on the rank's device "
                f"({self.device}); prepare what should stay elsewhere after moving it yourself, or not at all"
            )


def _refuse_placeholders(objects: tuple) -> None:
    """A ``DummyOptim``/``DummyScheduler`` that no DeepSpeed engine replaced would fail at its first step."""
    for obj in objects:
        if is_placeholder_optimizer(obj) or is_placeholder_scheduler(obj):
            raise ValueError(
                f"{type(obj).__name__} stands for what a DeepSpeed config names, and only a DeepSpeed engine builds"
                " that: pass it to prepare() with its model, on an Accelerator(deepspeed_plugin=...) of 2 or more"
                f" processes whose config has that section, or pass a torch"
                f" {'optimizer' if is_placeholder_optimizer(obj) else 'scheduler'}"
            )
