"""The Accelerator's set-up under Accelerate's names, and ``profile()``: what code written for
Accelerate reads or calls beside training (``accelerator.project_dir``, ``accelerator.ddp_handler``,
``accelerator.native_amp``, ...). ``Accelerator`` inherits these; the README lists them.

Examples:
    >>> from trainer_core import Accelerator
    >>> accelerator = Accelerator(cpu=True)
    >>> accelerator.split_batches, accelerator.even_batches, accelerator.native_amp, accelerator.fp8_enabled
    (False, True, False, False)
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import torch

__all__ = ["SetupNames", "PROFILE_FILE"]

PROFILE_FILE = "profile_{rank}.json"  # Accelerate's name for each rank's trace


class SetupNames:
    """Read-only names for the Accelerator's set-up; ``profile``; the FP8/LOMO/context-parallel names
    Accelerate offers for GPUs answer "not here" (False, None, a no-op context, or a clear error)."""

    dataloader_config: Any
    project_configuration: Any
    state: Any
    _handlers: Any
    _log_with: Any

    has_lomo_optimizer = False
    fp8_enabled = False
    has_fp8_handler = False
    delayed_fp8_autocast = False
    fp8_recipe_handler = te_recipe_handler = msamp_recipe_handler = ao_recipe_handler = None
    flag_tensor = None
    device_placement = True

    @property
    def fp8_backend(self) -> str:
        return "NO"

    # -- the kwargs handlers, by Accelerate's attribute names --------------------------------------

    def _handler(self, attribute: str) -> Any:
        return self._handlers.objects.get(attribute)

    ddp_handler = property(lambda self: self._handler("ddp_handler"))
    scaler_handler = property(lambda self: self._handler("scaler_handler"))
    init_handler = property(lambda self: self._handler("init_handler"))
    autocast_handler = property(lambda self: self._handler("autocast_handler"))
    profile_handler = property(lambda self: self._handler("profile_handler"))

    # -- data loading and project folders ------------------------------------------------------------

    split_batches = property(lambda self: self.dataloader_config.split_batches)
    dispatch_batches = property(lambda self: self.dataloader_config.dispatch_batches)
    even_batches = property(lambda self: self.dataloader_config.even_batches)
    use_seedable_sampler = property(lambda self: self.dataloader_config.use_seedable_sampler)
    non_blocking = property(lambda self: self.dataloader_config.non_blocking)
    use_stateful_dataloader = property(lambda self: self.dataloader_config.use_stateful_dataloader)
    project_dir = property(lambda self: self.project_configuration.project_dir)
    logging_dir = property(lambda self: self.project_configuration.logging_dir)
    save_iteration = property(lambda self: self.project_configuration.iteration)

    @property
    def log_with(self) -> list:
        """The trackers ``log_with`` asked for: names (``"all"`` expanded) and tracker objects."""
        from ..trackers import tracker_names

        if self._log_with is None:
            return []
        names, objects = tracker_names(self._log_with)
        return [*names, *objects]

    # -- the set-up ----------------------------------------------------------------------------------

    @property
    def native_amp(self) -> bool:
        """True when autocast runs in half precision (fp16 or bf16)."""
        return self.state.mixed_precision in ("fp16", "bf16")

    @property
    def multi_device(self) -> bool:
        """True with several processes on GPUs, CPUs or TPUs."""
        return self.state.distributed and self.state.distributed_type in ("MULTI_GPU", "MULTI_CPU", "XLA")

    @property
    def is_fsdp2(self) -> bool:
        return self.state.is_fsdp2

    @property
    def is_composable_parallelism_enabled(self) -> bool:
        return self.state.is_fsdp2

    @property
    def should_save_model(self) -> bool:
        """Every rank takes part in saving (sharded and gathered saves are collectives)."""
        return True

    @property
    def pipeline_parallel_rank(self) -> int:
        raise NotImplementedError("pipeline parallelism is not supported (nor in Accelerate)")

    @property
    def context_parallel_rank(self) -> int:
        raise NotImplementedError("context parallelism is not supported (nor in Accelerate)")

    @contextlib.contextmanager
    def maybe_context_parallel(
        self, buffers: Any = None, buffer_seq_dims: Any = None, no_restore_buffers: Any = None
    ) -> Iterator[None]:
        """Accelerate's context-parallel block: without context parallelism (always here) it does
        nothing, as in Accelerate."""
        yield

    def verify_device_map(self, model: torch.nn.Module) -> bool:
        """True when ``model`` (or a submodule) was dispatched over several devices (``hf_device_map``):
        such a model cannot be prepared for data-parallel training."""
        return any(len(getattr(module, "hf_device_map", None) or {}) > 1 for module in model.modules())

    def lomo_backward(self, loss: torch.Tensor, learning_rate: float) -> None:
        raise NotImplementedError("LOMO optimizers are not supported: use a torch.optim optimizer and backward()")

    def deepspeed_ulysses_dl_adapter(self, dl: Any, model: Any) -> Any:
        raise NotImplementedError("DeepSpeed Ulysses sequence parallelism is not supported")

    def clear(self, *objects: Any) -> list:
        """``free_memory``'s other name."""
        return self.free_memory(*objects)  # type: ignore[attr-defined]

    # -- profiling -------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def profile(self, profile_handler: Any = None) -> Iterator[torch.profiler.profile]:
        """Profile the block with ``torch.profiler`` as a ``ProfileKwargs`` handler says (this call's,
        else the Accelerator's, else the defaults: CPU, and CUDA on a GPU). With ``output_trace_dir``
        each rank writes its Chrome trace there as ``profile_<rank>.json``.

        Examples:
            >>> from trainer_core import Accelerator
            >>> accelerator = Accelerator(cpu=True)
            >>> with accelerator.profile() as profiler:
            ...     _ = torch.ones(4) * 2
            >>> any("aten::mul" in event.key for event in profiler.key_averages())
            True
        """
        handler = profile_handler or self.profile_handler
        with _profiler(handler, self.state.device) as profiler:
            yield profiler
        folder = getattr(handler, "output_trace_dir", None)
        if folder:
            os.makedirs(folder, exist_ok=True)
            profiler.export_chrome_trace(os.path.join(folder, PROFILE_FILE.format(rank=self.state.process_index)))


def _profiler(handler: Any, device: torch.device) -> torch.profiler.profile:
    """A ``torch.profiler.profile`` built from a ``ProfileKwargs`` handler's fields."""
    from torch.profiler import ProfilerActivity, profile, schedule

    names = getattr(handler, "activities", None) or (["cpu", "cuda"] if device.type == "cuda" else ["cpu"])
    activities = []
    for name in names:
        member = getattr(ProfilerActivity, str(getattr(name, "value", name)).upper(), None)
        if member is None:
            raise ValueError(f"ProfileKwargs activity {name!r} is not one of torch.profiler.ProfilerActivity")
        activities.append(member)
    options = getattr(handler, "schedule_option", None)
    return profile(
        activities=activities,
        schedule=schedule(**options) if options else None,
        on_trace_ready=getattr(handler, "on_trace_ready", None),
        record_shapes=getattr(handler, "record_shapes", False),
        profile_memory=getattr(handler, "profile_memory", False),
        with_stack=getattr(handler, "with_stack", False),
        with_flops=getattr(handler, "with_flops", False),
        with_modules=getattr(handler, "with_modules", False),
    )


def refuse_unsupported(device_type: str, device_placement: bool, **plugins: Any) -> None:
    """Refuse, with the reason, the ``Accelerator`` arguments trainer_core has no engine for.

    Examples:
        >>> refuse_unsupported("cpu", True, megatron_lm_plugin=None)
        >>> refuse_unsupported("cpu", True, megatron_lm_plugin=object())  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: megatron_lm_plugin: Megatron-LM training is not supported (it needs GPUs ...
    """
    if not device_placement and device_type != "cpu":
        raise ValueError(
            "device_placement=False: trainer_core places prepared objects on the rank's device; leave it True"
        )
    reasons = {
        "torch_tp_plugin": "use parallelism_config=ParallelismConfig(tp_size=...) for tensor parallelism",
        "megatron_lm_plugin": "Megatron-LM training is not supported (it needs GPUs and Megatron-LM);"
        " use fsdp_plugin or deepspeed_plugin",
    }
    for name, value in plugins.items():
        if value is not None:
            raise ValueError(f"{name}: {reasons[name]}")


def one_deepspeed_plugin(deepspeed_plugin: Any, deepspeed_plugins: Any) -> Any:
    """The DeepSpeed plugin from ``deepspeed_plugin`` or a one-entry ``deepspeed_plugins`` dict.

    Examples:
        >>> one_deepspeed_plugin(None, {"student": "plugin"})
        'plugin'
    """
    if deepspeed_plugins is None:
        return deepspeed_plugin
    if deepspeed_plugin is not None:
        raise ValueError("pass deepspeed_plugin or deepspeed_plugins, not both")
    plugins = deepspeed_plugins if isinstance(deepspeed_plugins, dict) else {"default": deepspeed_plugins}
    if len(plugins) != 1:
        raise ValueError(
            f"deepspeed_plugins holds {len(plugins)} plugins ({sorted(plugins)}): trainer_core runs one DeepSpeed"
            " plugin per Accelerator (several models with different DeepSpeed configs need one Accelerator each)"
        )
    return next(iter(plugins.values()))
