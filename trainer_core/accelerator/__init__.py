"""The ``Accelerator``: the same training code on 1 CPU, N CPUs or N GPUs.

Method names and meanings follow the API notebook users know from Hugging Face Accelerate, so such
code runs by changing one import. The Accelerator itself decides nothing about hardware: the
backend (cpu/cuda), the precision (no/bf16/fp16) and the distributed state are values chosen once in
``__init__`` and consulted, never re-derived.

Example (one process here; launched by notebook_launcher, every rank runs the same code on its
share of the data):
    >>> import torch.nn.functional as F
    >>> from torch.utils.data import DataLoader, TensorDataset
    >>> data = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    >>> model, optimizer = torch.nn.Linear(4, 2), None
    >>> optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    >>> accelerator = Accelerator(mixed_precision="bf16", gradient_accumulation_steps=2)
    >>> model, optimizer, loader = accelerator.prepare(model, optimizer, DataLoader(data, batch_size=8))
    >>> for x, y in loader:
    ...     with accelerator.accumulate(model):
    ...         loss = F.cross_entropy(model(x), y)
    ...         accelerator.backward(loss)
    ...         optimizer.step(); optimizer.zero_grad()
    >>> accelerator.step, loss.dtype        # 8 micro-batches; outputs come back in fp32
    (8, torch.float32)
"""

from __future__ import annotations

import collections
import contextlib
import gc
import os
import warnings
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from .. import ops
from ..compat.accelerator_state import AcceleratorState
from ..compat.handlers import Handlers
from ..compat.interop import share_state_with_accelerate
from ..compat.launch_environment import launch_plugins
from ..compat.setup_names import SetupNames, one_deepspeed_plugin, refuse_unsupported
from ..compiling import dynamo_settings
from ..data import DataState
from ..data_config import DataLoaderConfiguration
from ..metrics import MetricLog
from ..parallelism import MeshMethods, parallelism_config_from
from ..precision import select_precision
from ..prepared import PreparedObjects
from ..project import ProjectConfiguration
from ..strategies import select_strategy
from ..strategies.deepspeed.plugin import deepspeed_plugin_from
from ..strategies.fsdp.plugin import fsdp_plugin_from
from ..throughput import Throughput, shown_pace
from ..trackers import tracker_names
from .checkpointing import CheckpointMethods
from .measuring import DEVICE_MEMORY_METRIC, MEMORY_METRIC, MeasureMethods
from .preparing import PrepareMethods
from .tracking import TrackerMethods

__all__ = ["Accelerator", "MEMORY_METRIC", "DEVICE_MEMORY_METRIC"]


class Accelerator(PrepareMethods, TrackerMethods, CheckpointMethods, MeasureMethods, MeshMethods, SetupNames):
    """Training helper for one rank; see the module docstring.

    Args:
        mixed_precision: "no", "fp16" or "bf16"; None takes the launcher's choice
            (``ACCELERATE_MIXED_PRECISION``), else "no".
        gradient_accumulation_steps: micro-batches per optimizer step inside ``accumulate``.
        cpu: run on CPU even when a GPU is visible.
        project_dir: the run's folder: ``save_state()`` with no directory writes numbered
            checkpoints under ``<project_dir>/checkpoints`` (``ProjectConfiguration``).
        project_config: a ``ProjectConfiguration`` (``automatic_checkpoint_naming``, ``total_limit``, ...).
        dataloader_config: how loaders are sharded (``DataLoaderConfiguration``: ``split_batches``,
            ``data_seed``, ...; Accelerate's class is accepted).
        gradient_accumulation_plugin: Accelerate's ``GradientAccumulationPlugin`` (or any object with
            ``num_steps`` and ``sync_each_batch``): instead of ``gradient_accumulation_steps``.
        log_with: trackers for ``log`` besides the notebook view: "json", "csv", "tensorboard",
            "wandb", "mlflow", "comet_ml", "aim", "clearml", "dvclive", "swanlab", "trackio", "all",
            tracker objects, or a list (``trainer_core.trackers``); started by ``init_trackers``.
        fsdp_plugin: shard the model over the ranks with FSDP2 (``FullyShardedDataParallelPlugin``;
            Accelerate's plugin is accepted): each rank keeps 1/N of the parameters, gradients and
            optimizer state.
        deepspeed_plugin: train through DeepSpeed ZeRO (``DeepSpeedPlugin``, a DeepSpeed config dict
            or JSON path, or Accelerate's plugin): ``prepare`` hands the model and its optimizer to
            ``deepspeed.initialize`` and ``backward`` steps the engine. Needs the ``deepspeed`` extra.
            With neither plugin, the sharding ``accelerate launch`` set up (its environment
            variables, ``compat.launch_environment``) is used, as Accelerate's Accelerator does.
        parallelism_config: the ranks as a mesh (``ParallelismConfig(dp_shard_size=2, tp_size=2)``;
            Accelerate's is accepted), with ``fsdp_plugin``: FSDP2 shards over "dp_shard", the
            user's tensor-parallel layers span "tp" (``torch_device_mesh``), loaders shard by "dp_shard".
        step_scheduler_with_optimizer: a prepared scheduler steps only when the optimizer did, and
            then once per process (as Accelerate does: schedules are sized by the un-prepared
            loader's length), once with ``split_batches``; False steps it at every call.
        kwargs_handlers: Accelerate's handlers (DDP options and communication hook, GradScaler,
            process-group timeout, autocast, profiling; ``trainer_core.compat.handlers``).
        device_placement: False is accepted on the CPU (where everything already is), refused elsewhere.
        split_batches: Accelerate's older place for ``DataLoaderConfiguration(split_batches=)``.
        deepspeed_plugins: a dict holding one DeepSpeed plugin (instead of ``deepspeed_plugin``).
        dynamo_backend: a ``torch.compile`` backend ("inductor", "eager", ...; "no"): ``prepare``
            compiles each model last, as Accelerate does (``trainer_core.compiling``).
        dynamo_plugin: instead of ``dynamo_backend``, a ``TorchDynamoPlugin`` (ours or
            Accelerate's): backend, mode, fullgraph, dynamic, options, regional compilation.
        torch_tp_plugin: refused: tensor parallelism goes through ``parallelism_config``.
        megatron_lm_plugin: refused: there is no Megatron-LM engine here.
    """

    def __init__(
        self,
        mixed_precision: str | None = None,
        gradient_accumulation_steps: int = 1,
        cpu: bool = False,
        project_dir: str | None = None,
        project_config: ProjectConfiguration | None = None,
        dataloader_config: DataLoaderConfiguration | None = None,
        gradient_accumulation_plugin: Any = None,
        step_scheduler_with_optimizer: bool = True,
        kwargs_handlers: list | None = None,
        rng_types: list | None = None,
        log_with: Any = None,
        fsdp_plugin: Any = None,
        deepspeed_plugin: Any = None,
        parallelism_config: Any = None,
        device_placement: bool = True,
        split_batches: bool | None = None,
        deepspeed_plugins: Any = None,
        dynamo_backend: Any = None,
        dynamo_plugin: Any = None,
        torch_tp_plugin: Any = None,
        megatron_lm_plugin: Any = None,
    ) -> None:
        tracker_names(log_with or [])  # unknown names are refused here, as Accelerate does
        self._log_with = log_with
        self._trigger = False
        self.trackers: list = []
        self._save_hooks: collections.OrderedDict = collections.OrderedDict()
        self._load_hooks: collections.OrderedDict = collections.OrderedDict()
        self._handlers = handlers = Handlers.from_list(kwargs_handlers)
        self.rng_types = rng_types  # accepted: prepared loaders are seeded alike on every rank anyway
        if gradient_accumulation_plugin is not None:
            if gradient_accumulation_steps != 1:
                raise ValueError("pass gradient_accumulation_steps or gradient_accumulation_plugin, not both")
            gradient_accumulation_steps = gradient_accumulation_plugin.num_steps
        self.sync_each_batch = bool(getattr(gradient_accumulation_plugin, "sync_each_batch", False))
        self.step_scheduler_with_optimizer = step_scheduler_with_optimizer
        if not isinstance(gradient_accumulation_steps, int) or gradient_accumulation_steps < 1:
            raise ValueError(f"gradient_accumulation_steps must be an int >= 1, got {gradient_accumulation_steps!r}")
        self.state = AcceleratorState.from_environment(use_cpu=cpu, timeout=handlers.timeout)
        refuse_unsupported(
            self.state.device.type,
            device_placement,
            torch_tp_plugin=torch_tp_plugin,
            megatron_lm_plugin=megatron_lm_plugin,
        )
        self.state.dynamo_plugin = self._dynamo = dynamo_settings(dynamo_backend, dynamo_plugin)
        self.device_placement = device_placement
        chosen = mixed_precision or os.environ.get("ACCELERATE_MIXED_PRECISION") or "no"
        self.fsdp_plugin, self.deepspeed_plugin = _sharding_plugins(fsdp_plugin, deepspeed_plugin, deepspeed_plugins)
        if self.deepspeed_plugin is not None:
            gradient_accumulation_steps = self.deepspeed_plugin.accumulation_steps(gradient_accumulation_steps)
        self.parallelism_config = parallelism_config_from(parallelism_config)
        self._mesh = None
        if self.parallelism_config is not None:
            self._mesh = self.parallelism_config.build_device_mesh(
                self.state.device.type, self.state.num_processes, sharded=self.fsdp_plugin is not None
            )
        sharding = self.fsdp_plugin or self.deepspeed_plugin
        self.strategy = select_strategy(self.state, handlers.ddp, sharding, self._mesh, handlers.comm_hook)
        precision = select_precision(chosen, self.state.backend, handlers.scaler)
        precision.autocast_options = handlers.autocast
        self.precision = self.strategy.adapt_precision(precision)
        self.gradient_accumulation_steps = gradient_accumulation_steps
        self.step = 0
        self.sync_gradients = True
        self._metrics = MetricLog()
        self._throughput = Throughput(shown_pace(self._metrics.show), peak_tflops=self._peak_tflops())
        self._data_state = DataState(self._throughput)
        self.dataloader_config = DataLoaderConfiguration.from_any(dataloader_config)
        if split_batches is not None:
            self.dataloader_config.split_batches = split_batches
        self.prepared = PreparedObjects()
        self._memory_shown = False
        self._device_memory_due = 0.0  # time.monotonic() from which the next peak is shown
        self.project_configuration = project_config or ProjectConfiguration(project_dir)
        if project_dir is not None and project_config is not None:
            self.project_configuration.set_directories(project_dir)
        if project_dir is not None and project_config is None:
            self.project_configuration.automatic_checkpoint_naming = True
        share_state_with_accelerate(chosen, cpu or self.state.device.type == "cpu")
        self.state.attach(self)

    @property
    def gradient_state(self) -> DataState:
        """The data loader state (``active_dataloader``, ``end_of_dataloader``, ``remainder``) under
        Accelerate's name."""
        return self._data_state

    @property
    def mixed_precision(self) -> str:
        return self.precision.name

    @property
    def scaler(self) -> Any:
        return self.precision.scaler

    # -- training step ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def accumulate(self, *models: torch.nn.Module) -> Iterator[None]:
        """One micro-batch: gradients sync (and the optimizer steps) every N-th time or at the last batch."""
        self.step += 1
        self.sync_gradients = self._data_state.end_of_dataloader or self.step % self.gradient_accumulation_steps == 0
        with contextlib.ExitStack() as stack:
            if not self.sync_gradients and not self.sync_each_batch:
                for model in models:
                    stack.enter_context(self.no_sync(model))
            yield

    @contextlib.contextmanager
    def join_uneven_inputs(self, joinables: Iterable[Any], even_batches: bool | None = None) -> Iterator[None]:
        """Train DDP models on loaders whose ranks get different numbers of batches: ranks that run
        out shadow the others' collectives (``torch.distributed.algorithms.Join``), on GPUs and CPUs.
        ``even_batches`` overrides the prepared loaders' setting inside the context.

        Examples:
            >>> accelerator = Accelerator(cpu=True)
            >>> with accelerator.join_uneven_inputs([]):
            ...     pass
        """
        if self.distributed_type not in ("MULTI_GPU", "MULTI_CPU", "NO"):
            warnings.warn(
                "Joining uneven inputs is only supported for multi-GPU (and multi-CPU) DDP training:"
                " join_uneven_inputs has no effect here",
                stacklevel=3,
            )
            yield
            return
        changed = []
        if even_batches is not None:
            for loader in self.prepared.dataloaders:
                sampler = getattr(loader, "_sampler", None)
                if sampler is None:
                    warnings.warn(
                        "Overriding even_batches is only supported for map-style datasets; an iterable one keeps"
                        " its setting",
                        stacklevel=3,
                    )
                    continue
                changed.append((sampler, sampler.even_batches))
                sampler.even_batches = even_batches
        models = [model for model in joinables if self.strategy.joinable(model)]
        try:
            if models and self.distributed_type != "NO":
                from torch.distributed.algorithms.join import Join

                with Join(list[Any](models)):
                    yield
            else:
                yield
        finally:
            for sampler, value in changed:
                sampler.even_batches = value

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager:
        """Skip the gradient all-reduce inside this context (a no-op for one process)."""
        return self.strategy.no_sync(model)

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """``loss.backward()``, divided for gradient accumulation and scaled for fp16 (with DeepSpeed:
        the engine's backward, and its step at the end of an accumulation)."""
        with self._throughput.syncing():
            self.strategy.backward(
                loss, self.precision, self.gradient_accumulation_steps, self.sync_gradients, **kwargs
            )

    def unscale_gradients(self, optimizer: Any = None) -> None:
        """Unscale fp16 gradients (once per step) of ``optimizer`` (one or a list of prepared
        optimizers), or of every prepared optimizer."""
        chosen = self.prepared.optimizers if optimizer is None else optimizer
        for prepared in chosen if isinstance(chosen, (list, tuple)) else [chosen]:
            self.precision.unscale(getattr(prepared, "optimizer", prepared))

    def clip_grad_norm_(self, parameters: Any, max_norm: float, norm_type: float = 2) -> Any:
        """Clip the gradient norm (after unscaling fp16 gradients); returns the total norm (with
        DeepSpeed, which clips at its step by its ``gradient_clipping``: the norm it found)."""
        self.unscale_gradients()
        return self.strategy.clip_grad_norm(parameters, max_norm, norm_type)

    def clip_grad_value_(self, parameters: Any, clip_value: float) -> None:
        self.unscale_gradients()
        torch.nn.utils.clip_grad_value_(parameters, clip_value)

    def autocast(self, autocast_handler: Any = None) -> contextlib.AbstractContextManager:
        """The precision's autocast context (a no-op for "no"); an ``AutocastKwargs`` handler (ours or
        Accelerate's) sets its ``enabled`` and ``cache_enabled``."""
        if autocast_handler is None:
            return self.precision.autocast()
        options = {"enabled": autocast_handler.enabled}
        if getattr(autocast_handler, "cache_enabled", None) is not None:
            options["cache_enabled"] = autocast_handler.cache_enabled
        return self.precision.autocast(**options)

    # -- collectives ------------------------------------------------------------------------------

    def gather(self, tensor: Any) -> Any:
        """Every rank's tensors concatenated in rank order (assuming 2 processes: [0] and [1] → [0, 1])."""
        return self.strategy.all_gather(tensor)

    def gather_for_metrics(self, input_data: Any, use_gather_object: bool = False) -> Any:
        """Like ``gather``, but the padding added to even out the last batch is dropped.

        Gathering every eval batch therefore yields exactly the dataset's samples, in dataset order.
        Non-tensor objects are gathered with ``all_gather_object``.
        """
        tensors = not use_gather_object and ops.all_tensors(input_data)
        gathered = self.gather(input_data) if tensors else ops.gather_object(self.state, input_data)
        remainder = self._data_state.remainder
        if not self._data_state.end_of_dataloader or remainder is None:
            return gathered
        if tensors:
            return ops.apply_to_tensors(lambda t: t[:remainder], gathered)
        return gathered[:remainder]

    def reduce(self, tensor: Any, reduction: str = "sum", scale: float = 1.0) -> Any:
        """Every tensor in ``tensor`` (a tensor or a structure of them) reduced across processes
        ("sum", "mean", "max", "min"), times ``scale``."""
        return self.strategy.reduce(tensor, reduction, scale)

    def pad_across_processes(self, tensor: Any, dim: int = 0, pad_index: int = 0, pad_first: bool = False) -> Any:
        return ops.pad_across_processes(self.state, tensor, dim, pad_index, pad_first)

    @property
    def optimizer_step_was_skipped(self) -> bool:
        """True when the last optimizer step was skipped (fp16 found inf/NaN gradients)."""
        return any(optimizer.step_was_skipped for optimizer in self.prepared.optimizers)

    def trigger_sync_in_backward(self, model: torch.nn.Module) -> Any:
        """Make the next backward of a DDP model all-reduce its gradients even inside ``no_sync``
        (several forwards before one backward)."""
        return self.strategy.sync_next_backward(model)

    def free_memory(self, *objects: Any) -> list[None]:
        """Drop the references this Accelerator holds (and ``objects``), collect, empty the device cache."""
        self.prepared.clear()
        self.precision.forget()
        self.step = 0
        gc.collect()
        self.state.backend.empty_cache()
        return [None] * len(objects)


def _sharding_plugins(fsdp_plugin: Any, deepspeed_plugin: Any, deepspeed_plugins: Any) -> tuple[Any, Any]:
    """trainer_core's (FSDP plugin, DeepSpeed plugin) from those given, else from what ``accelerate
    launch`` set up (its variables), else (None, None)."""
    if fsdp_plugin is None and deepspeed_plugin is None and deepspeed_plugins is None:
        fsdp_plugin, deepspeed_plugin = launch_plugins()
    fsdp = fsdp_plugin_from(fsdp_plugin)
    deepspeed = deepspeed_plugin_from(one_deepspeed_plugin(deepspeed_plugin, deepspeed_plugins))
    if fsdp is not None and deepspeed is not None:
        raise ValueError("pass fsdp_plugin or deepspeed_plugin, not both")
    return fsdp, deepspeed
