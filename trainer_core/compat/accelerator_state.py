"""``accelerator.state``: who this process is, plus the training set-up, under Accelerate's names.

Code written for Accelerate (Transformers' Trainer, TRL, Accelerate's own scripts) reads the
Accelerator's set-up through ``accelerator.state``: ``state.deepspeed_plugin is not None``,
``state.mixed_precision``, ``state.fsdp_plugin``, ``state.distributed_type`` and the process helpers
(``state.print``, ``state.main_process_first()``, ...). This is the ``DistributedState`` the
Accelerator runs on, with those names answered from its Accelerator.

Examples:
    >>> from trainer_core import Accelerator
    >>> state = Accelerator(cpu=True).state
    >>> state.mixed_precision, state.deepspeed_plugin, state.is_fsdp2, state.initialized
    ('no', None, False, True)
    >>> state.deepspeed_plugins, state.dynamo_plugin.backend
    (None, 'NO')
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import torch

from ..accelerator.process_helpers import ProcessHelpers
from ..compiling import DynamoSettings
from ..state import DistributedState

__all__ = ["AcceleratorState"]

# the process helpers the state offers as its Accelerator does (Accelerate's PartialState has them)
_HELPERS = (
    "print",
    "main_process_first",
    "local_main_process_first",
    "split_between_processes",
    "on_main_process",
    "on_local_main_process",
    "on_last_process",
    "on_process",
    "on_local_process",
)


class _Helpers(ProcessHelpers):
    def __init__(self, state: DistributedState) -> None:
        self.state = state
        self._trigger = False


class AcceleratorState(DistributedState):
    """The Accelerator's ``state``; ``attach`` records its Accelerator's set-up once that is made."""

    _setup: Mapping[str, Any] = MappingProxyType({})
    dynamo_plugin = DynamoSettings()  # the Accelerator sets its own (``trainer_core.compiling``)
    torch_tp_plugin = None
    megatron_lm_plugin = None
    use_ipex = False
    initialized = True

    def attach(self, accelerator: Any) -> None:
        """Record ``accelerator``'s set-up (not the Accelerator itself: no reference cycle)."""
        self._setup = {
            "mixed_precision": accelerator.mixed_precision,
            "deepspeed_plugin": accelerator.deepspeed_plugin,
            "fsdp_plugin": accelerator.fsdp_plugin,
            "parallelism_config": accelerator.parallelism_config,
            "device_mesh": accelerator._mesh,
        }

    def __getattr__(self, name: str) -> Any:
        if name in _HELPERS:
            return getattr(_Helpers(self), name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # -- the training set-up ------------------------------------------------------------------------

    @property
    def mixed_precision(self) -> str:
        """ "no", "fp16" or "bf16": what the Accelerator's autocast and scaler use."""
        return self._setup.get("mixed_precision", "no")

    @property
    def deepspeed_plugin(self) -> Any:
        """The DeepSpeed plugin in use, or None (Transformers tests this to choose its code path)."""
        return self._setup.get("deepspeed_plugin")

    @property
    def deepspeed_plugins(self) -> dict | None:
        """Accelerate's named DeepSpeed plugins: ``{"default": plugin}``, or None without DeepSpeed."""
        plugin = self.deepspeed_plugin
        return None if plugin is None else {"default": plugin}

    def get_deepspeed_plugin(self, name: str) -> Any:
        """The DeepSpeed plugin called ``name`` (one plugin per Accelerator here: "default")."""
        plugins = self.deepspeed_plugins or {}
        if name not in plugins:
            raise ValueError(f"no DeepSpeed plugin called {name!r} (this Accelerator has {sorted(plugins)})")
        return plugins[name]

    def select_deepspeed_plugin(self, name: str | None = None) -> None:
        """Choose the active DeepSpeed plugin: one plugin per Accelerator here, so only "default"."""
        if name not in (None, "default") or self.deepspeed_plugin is None:
            raise ValueError(
                f"cannot select DeepSpeed plugin {name!r}: trainer_core runs one DeepSpeed plugin per Accelerator"
                " (several models with different DeepSpeed configs need one Accelerator each)"
            )

    @property
    def fsdp_plugin(self) -> Any:
        """The FSDP plugin in use, or None."""
        return self._setup.get("fsdp_plugin")

    @property
    def is_fsdp2(self) -> bool:
        """True when the model is sharded with FSDP (trainer_core's FSDP is FSDP2, ``fully_shard``)."""
        return self.fsdp_plugin is not None

    @property
    def parallelism_config(self) -> Any:
        return self._setup.get("parallelism_config")

    @property
    def device_mesh(self) -> Any:
        """The device mesh of a ``parallelism_config`` run, or None."""
        return self._setup.get("device_mesh")

    # -- the process --------------------------------------------------------------------------------

    @property
    def debug(self) -> bool:
        """Accelerate's debug mode (``ACCELERATE_DEBUG_MODE``): shape checks before collectives."""
        return os.environ.get("ACCELERATE_DEBUG_MODE", "").lower() in ("1", "true", "yes")

    @property
    def fork_launched(self) -> bool:
        """True in a rank the notebook launcher forked (Accelerate's ``FORK_LAUNCHED``)."""
        return os.environ.get("FORK_LAUNCHED", "").lower() in ("1", "true", "yes")

    @property
    def default_device(self) -> torch.device:
        return self.device

    def set_device(self) -> None:
        """Make this process's device the current one (a no-op off CUDA)."""
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
