"""trainer_core: an Accelerator that runs the same training code on 1 CPU, N CPUs and N GPUs.

Examples:
    >>> from trainer_core import Accelerator, set_seed
    >>> set_seed(0)
    >>> accelerator = Accelerator()
    >>> accelerator.num_processes
    1

Importing the package imports nothing else: its public names load on first use (torch with them),
so ``trainer_core.hardware`` answers host questions cheaply. It sets torch to count GPUs through
NVML, as notebook_launcher does, so code that imports it first never initializes CUDA by counting.
"""

import importlib
import os
from typing import TYPE_CHECKING, Any

os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")

from ._version import __version__

if TYPE_CHECKING:  # what the names are, for type checkers; at run time they load on first use
    from .accelerator import Accelerator
    from .big_modeling import (
        cpu_offload,
        disk_offload,
        dispatch_model,
        infer_auto_device_map,
        init_empty_weights,
        init_on_device,
        load_checkpoint_and_dispatch,
        load_checkpoint_in_model,
    )
    from .compiling import TorchDynamoPlugin
    from .data_config import DataLoaderConfiguration
    from .parallelism import ParallelismConfig
    from .seeding import set_seed
    from .state import DistributedState
    from .strategies.deepspeed.placeholders import DummyOptim, DummyScheduler
    from .strategies.deepspeed.plugin import DeepSpeedPlugin
    from .strategies.fsdp.plugin import FullyShardedDataParallelPlugin

_PUBLIC = {
    "Accelerator": "accelerator",
    "cpu_offload": "big_modeling",
    "disk_offload": "big_modeling",
    "dispatch_model": "big_modeling",
    "infer_auto_device_map": "big_modeling",
    "init_empty_weights": "big_modeling",
    "init_on_device": "big_modeling",
    "load_checkpoint_and_dispatch": "big_modeling",
    "load_checkpoint_in_model": "big_modeling",
    "DataLoaderConfiguration": "data_config",
    "TorchDynamoPlugin": "compiling",
    "DummyOptim": "strategies.deepspeed.placeholders",
    "DummyScheduler": "strategies.deepspeed.placeholders",
    "DeepSpeedPlugin": "strategies.deepspeed.plugin",
    "FullyShardedDataParallelPlugin": "strategies.fsdp.plugin",
    "ParallelismConfig": "parallelism",
    "set_seed": "seeding",
    "DistributedState": "state",
}


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'trainer_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_PUBLIC[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_PUBLIC))


__all__ = [
    "__version__",
    "Accelerator",
    "DataLoaderConfiguration",
    "DeepSpeedPlugin",
    "TorchDynamoPlugin",
    "DummyOptim",
    "DummyScheduler",
    "FullyShardedDataParallelPlugin",
    "ParallelismConfig",
    "set_seed",
    "DistributedState",
    "cpu_offload",
    "disk_offload",
    "dispatch_model",
    "infer_auto_device_map",
    "init_empty_weights",
    "init_on_device",
    "load_checkpoint_and_dispatch",
    "load_checkpoint_in_model",
]
