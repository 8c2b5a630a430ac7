"""trainer_core: an Accelerator that runs the same training code on 1 CPU, N CPUs and N GPUs.

Examples:
    >>> from trainer_core import Accelerator, set_seed
    >>> set_seed(0)
    >>> accelerator = Accelerator()
    >>> accelerator.num_processes
    1
"""

from notebook_launcher._version import __version__

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
from .data_config import DataLoaderConfiguration
from .deepspeed_placeholders import DummyOptim, DummyScheduler
from .deepspeed_plugin import DeepSpeedPlugin
from .fsdp_plugin import FullyShardedDataParallelPlugin
from .parallelism import ParallelismConfig
from .seeding import set_seed
from .state import DistributedState

__all__ = [
    "__version__",
    "Accelerator",
    "DataLoaderConfiguration",
    "DeepSpeedPlugin",
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
