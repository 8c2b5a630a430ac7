"""DeepSpeed ZeRO: the model and its optimizer handed to ``deepspeed.initialize`` at ``prepare``.

``prepare_together`` fills the plugin's config (``resolve_config``: micro-batch from the loaders
given in the same call, accumulation, precision) and replaces the model with DeepSpeed's engine.
The engine keeps the optimizer: ``backward`` runs ``engine.backward`` and, at the accumulation
boundary, ``engine.step`` (clip, step, zero the gradients), so the prepared optimizer's ``step``
and ``zero_grad`` do nothing, as in Accelerate. Checkpoints are the engine's own
(``pytorch_model/`` with every rank's partitions, Accelerate's layout).

Examples:
    >>> from trainer_core.strategies.deepspeed.plugin import DeepSpeedPlugin
    >>> from trainer_core.state import DistributedState
    >>> strategy = DeepSpeedStrategy(DistributedState.from_environment(use_cpu=True), DeepSpeedPlugin(zero_stage=3))
    >>> strategy.name, strategy.joinable(torch.nn.Linear(2, 2))
    ('deepspeed', False)
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import torch
from torch.optim.lr_scheduler import LRScheduler
from torch.utils.data import DataLoader

from ...precision import FullPrecision
from ..base import PrepareSettings
from ..parallel import ParallelStrategy
from .placeholders import (
    check_placeholders,
    is_placeholder_optimizer,
    is_placeholder_scheduler,
    placeholder_values,
)
from .plugin import DeepSpeedPlugin, import_deepspeed, resolve_config
from .precision import EnginePrecision

__all__ = ["DeepSpeedStrategy", "EngineOptimizer", "EngineScheduler"]

MODEL_NAME = "pytorch_model"  # the checkpoint tag of the first model, as Accelerate names it


class DeepSpeedStrategy(ParallelStrategy):
    name = "deepspeed"
    shards_state = True

    @classmethod
    def for_plugin(cls, state: Any, plugin: Any, mesh: Any = None) -> DeepSpeedStrategy:
        """``mesh``: never given (a ParallelismConfig needs the FSDP plugin)."""
        import_deepspeed()  # fail at Accelerator(), not at the first prepare, when it is missing
        return cls(state, plugin)

    def __init__(self, state: Any, plugin: DeepSpeedPlugin) -> None:
        super().__init__(state)
        self.plugin = plugin
        self.engines: list[Any] = []
        self._trained: Any = None
        self._engine_of_optimizer: dict[int, Any] = {}
        # DeepSpeed calls collectives torch deprecates: a warning at every step that no user can act on
        warnings.filterwarnings(
            "ignore",
            r"`torch\.distributed\.(all_gather_into_tensor|reduce_scatter_tensor)` is deprecated",
            FutureWarning,
        )

    def adapt_precision(self, precision: FullPrecision) -> FullPrecision:
        return EnginePrecision(precision)

    def compile(self, model: torch.nn.Module, settings: Any) -> torch.nn.Module:
        """Refused: the engine owns the module's hooks and offloaded parameters."""
        if settings.enabled:
            raise ValueError(
                "dynamo_backend with DeepSpeed is not supported by trainer_core: compile the module before"
                " prepare (torch.compile(model)), or use DDP or FSDP2 with dynamo_backend"
            )
        return model

    def prepare_together(self, objects: Sequence[Any], settings: PrepareSettings) -> list[Any]:
        """``objects`` with the model replaced by a DeepSpeed engine that owns the optimizer given with
        it; a ``DummyOptim``/``DummyScheduler`` replaced by the optimizer/schedule DeepSpeed built."""
        models = [obj for obj in objects if isinstance(obj, torch.nn.Module) and not _is_engine(obj)]
        if not models:
            return list(objects)
        optimizers = [obj for obj in objects if isinstance(obj, torch.optim.Optimizer) or is_placeholder_optimizer(obj)]
        schedulers = [obj for obj in objects if isinstance(obj, LRScheduler) or is_placeholder_scheduler(obj)]
        if len(models) > 1 or len(optimizers) > 1 or len(schedulers) > 1:
            raise ValueError(
                "with DeepSpeed, prepare() takes one model and at most one optimizer and one scheduler per call:"
                " prepare each model with its optimizer in a call of its own"
            )
        model, optimizer = models[0], (optimizers[0] if optimizers else None)
        scheduler = schedulers[0] if schedulers else None
        check_placeholders(self.plugin.config, optimizer, scheduler)
        placeholder = is_placeholder_optimizer(optimizer)
        config = resolve_config(
            self.plugin,
            batch_sizes=[obj.batch_size for obj in objects if isinstance(obj, DataLoader)],
            num_processes=self.state.num_processes,
            gradient_accumulation_steps=settings.gradient_accumulation_steps,
            mixed_precision=settings.mixed_precision,
            split_batches=settings.split_batches,
            model=model,
            client_optimizer=optimizer is not None and not placeholder,
            placeholders=placeholder_values(optimizer, scheduler, self.state.num_processes, settings.split_batches),
        )
        groups = list(getattr(optimizer, "param_groups", []))
        engine = self._initialize(model, optimizer, scheduler, config)
        if isinstance(scheduler, LRScheduler):
            _drop_removed_groups(scheduler, groups)
        if optimizer is not None or "optimizer" in config:
            self._trained = engine  # what backward steps; a model prepared for evaluation has no optimizer
        replaced: dict[int, Any] = {id(model): engine}
        if placeholder:
            replaced[id(optimizer)] = optimizer = engine.basic_optimizer  # prepare() wraps it next
        if optimizer is not None:
            self._engine_of_optimizer[id(optimizer)] = engine
        if is_placeholder_scheduler(scheduler):
            replaced[id(scheduler)] = EngineScheduler(engine.lr_scheduler)
        return [replaced.get(id(obj), obj) for obj in objects]

    def _initialize(self, model: torch.nn.Module, optimizer: Any, scheduler: Any, config: dict) -> Any:
        """``deepspeed.initialize`` with the model and either the torch optimizer or, for a config's
        optimizer, the parameters (a ``DummyOptim``'s, else the model's trainable ones)."""
        kwargs: dict[str, Any] = {"model": model, "config": config}
        if is_placeholder_optimizer(optimizer):
            kwargs["model_parameters"] = optimizer.params
        elif optimizer is not None:
            kwargs["optimizer"] = optimizer
        else:
            kwargs["model_parameters"] = [p for p in model.parameters() if p.requires_grad]
        if is_placeholder_scheduler(scheduler) and scheduler.lr_scheduler_callable is not None:
            kwargs["lr_scheduler"] = scheduler.lr_scheduler_callable
        engine, *_ = import_deepspeed().initialize(**kwargs)
        return engine

    def setup_module(self, model: torch.nn.Module) -> torch.nn.Module:
        if not _is_engine(model):
            raise ValueError("with DeepSpeed, prepare the model in the same prepare() call as its optimizer and loader")
        return model

    def setup_optimizer(self, optimizer: torch.optim.Optimizer) -> Any:
        engine = self._engine_of_optimizer.get(id(optimizer))
        if engine is None:
            raise ValueError("with DeepSpeed, prepare the optimizer in the same prepare() call as its model")
        return EngineOptimizer(engine.optimizer)

    def backward(self, loss: torch.Tensor, precision: Any, accumulation_steps: int, sync: bool, **kwargs: Any) -> None:
        """The engine's backward (which divides by the accumulation steps itself) and, at the
        boundary, its step."""
        engine = self._engine()
        engine.set_gradient_accumulation_boundary(sync)
        engine.backward(loss, **kwargs)
        if sync:
            engine.step()

    def clip_grad_norm(self, parameters: Any, max_norm: float, norm_type: float = 2) -> Any:
        """The engine clips at its step (``gradient_clipping``); this gives the norm it found."""
        norm = self._engine().get_global_grad_norm()
        return norm.item() if hasattr(norm, "item") else norm

    def unwrap(self, model: torch.nn.Module) -> torch.nn.Module:
        engine: Any = model
        return engine.module if _is_engine(model) else model

    def module_state_dict(self, model: torch.nn.Module) -> dict[str, Any]:
        """The full weights, on the CPU; under ZeRO-3 gathered to rank 0 (a collective: every rank
        calls it) and ``{}`` on the others."""
        if self.plugin.zero_stage == 3 and _is_engine(model):
            engine: Any = model
            full = engine._zero3_consolidated_16bit_state_dict()
            return {name: tensor.detach().cpu().clone() for name, tensor in (full or {}).items()}
        return {name: tensor.detach().cpu().clone() for name, tensor in self.unwrap(model).state_dict().items()}

    def load_module_state_dict(self, model: torch.nn.Module, state_dict: dict[str, Any]) -> None:
        if self.plugin.zero_stage != 3:
            self.unwrap(model).load_state_dict(state_dict)
            return
        import deepspeed

        with deepspeed.zero.GatheredParameters(list(self.unwrap(model).parameters()), modifier_rank=0):
            if self.state.is_main_process:
                self.unwrap(model).load_state_dict(state_dict)

    def save_training_state(self, models: list, optimizers: list, directory: str) -> bool:
        """Every engine writes its checkpoint (model, optimizer partitions) under its tag, on every rank."""
        for i, model in enumerate(models):
            model.save_checkpoint(directory, _tag(i))
        return True

    def load_training_state(self, models: list, optimizers: list, directory: str) -> bool:
        for i, model in enumerate(models):
            path, _ = model.load_checkpoint(directory, _tag(i))
            if path is None:
                raise FileNotFoundError(f"no DeepSpeed checkpoint {_tag(i)!r} in {directory}")
        return True

    def _engine(self) -> Any:
        if self._trained is None:
            raise RuntimeError("with DeepSpeed, prepare() the model with its optimizer before backward()")
        return self._trained


class _EngineHeld:
    """A view of an object the engine steps itself: its state and other attributes are the held one's."""

    def __init__(self, held: Any) -> None:
        self._held = held

    def state_dict(self) -> dict:
        return self._held.state_dict()

    def load_state_dict(self, state_dict: dict) -> None:
        self._held.load_state_dict(state_dict)

    def __getattr__(self, name: str) -> Any:
        if name == "_held":  # not set yet (a copy being built)
            raise AttributeError(name)
        return getattr(self._held, name)


class EngineOptimizer(_EngineHeld):
    """The optimizer inside a DeepSpeed engine, which steps and zeroes it in ``backward``: ``step`` and
    ``zero_grad`` here do nothing; the rest (param groups for schedulers, state) is the engine's.

    Examples:
        >>> inner = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.5)
        >>> view = EngineOptimizer(inner)
        >>> view.step(), view.param_groups[0]["lr"], view.overflow
        (None, 0.5, False)
    """

    def __init__(self, optimizer: Any) -> None:
        super().__init__(optimizer)
        self.optimizer = optimizer

    @property
    def param_groups(self) -> list[dict]:
        return self.optimizer.param_groups

    @property
    def overflow(self) -> bool:
        """Whether the engine's last step was skipped (fp16 gradients overflowed)."""
        return bool(getattr(self.optimizer, "overflow", False))

    def step(self, closure: Any = None) -> None:
        return None

    def zero_grad(self, set_to_none: bool = True) -> None:
        return None


# The lists torch's schedules keep one entry per param group in (LambdaLR/MultiplicativeLR's
# lambdas, CyclicLR's bounds and momenta, ReduceLROnPlateau's floors, every schedule's rates).
_PER_GROUP = ("base_lrs", "_last_lr", "lr_lambdas", "max_lrs", "min_lrs", "base_momentums", "max_momentums")


def _drop_removed_groups(scheduler: LRScheduler, groups: list[dict]) -> None:
    """DeepSpeed removes a torch optimizer's empty param groups (a no-decay group that matched no
    name, say); a schedule built on it keeps one entry per original group in its lists (base rates,
    last rates, lambdas), and torch's step then fails on the mismatch. Drop the removed groups'
    entries too (in the schedules a SequentialLR or ChainedScheduler holds as well).

    Examples:
        >>> used, unused = torch.zeros(1, requires_grad=True), []
        >>> optimizer = torch.optim.SGD([{"params": [used]}, {"params": unused}], lr=1.0)
        >>> schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, [lambda s: 1.0, lambda s: 0.5])
        >>> before = list(optimizer.param_groups)
        >>> optimizer.param_groups[:] = optimizer.param_groups[:1]  # what deepspeed.initialize does
        >>> _drop_removed_groups(schedule, before)
        >>> schedule.step(); schedule.get_last_lr()
        [1.0]
    """
    kept = [index for index, group in enumerate(groups) if any(group is g for g in scheduler.optimizer.param_groups)]
    if len(kept) < len(groups):
        _keep_entries(scheduler, kept, len(groups))


def _keep_entries(scheduler: Any, kept: list[int], count: int) -> None:
    for inner in getattr(scheduler, "_schedulers", []):
        _keep_entries(inner, kept, count)
    for name in _PER_GROUP:
        value = getattr(scheduler, name, None)
        if isinstance(value, list) and len(value) == count:
            setattr(scheduler, name, [value[index] for index in kept])


class EngineScheduler(_EngineHeld):
    """The schedule inside a DeepSpeed engine (a config's ``"scheduler"`` or one a ``DummyScheduler``'s
    callable built), which the engine steps at each optimizer step: ``step`` here does nothing, as
    Accelerate's wrapper; the rest (``get_last_lr``, state) is the schedule's. It is saved in the
    engine's checkpoint.

    Examples:
        >>> inner = torch.optim.lr_scheduler.StepLR(torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0), 1)
        >>> view = EngineScheduler(inner)
        >>> view.step(), view.get_last_lr()
        (None, [1.0])
    """

    def __init__(self, scheduler: Any) -> None:
        super().__init__(scheduler)
        self.scheduler = scheduler

    def step(self, *args: Any, **kwargs: Any) -> None:
        return None


def _is_engine(model: Any) -> bool:
    return any(cls.__name__ == "DeepSpeedEngine" for cls in type(model).__mro__)


def _tag(index: int) -> str:
    return MODEL_NAME if index == 0 else f"{MODEL_NAME}_{index}"
