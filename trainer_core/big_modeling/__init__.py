"""Big-model inference: build on the meta device, load sharded checkpoints a tensor at a time, and
run a model spread over GPUs, the CPU and the disk.

``empty`` (``init_empty_weights``), ``sizes``, ``device_map`` (``infer_auto_device_map``),
``files`` (sharded safetensors), ``offload`` (the disk folder), ``hooks`` (just-in-time weights),
``dispatch`` (``load_checkpoint_and_dispatch``, ``dispatch_model``, ``cpu_offload``,
``disk_offload``).

Examples:
    >>> import torch
    >>> with init_empty_weights():
    ...     model = torch.nn.Linear(50_000, 50_000)    # 10 GB of float32, built in no memory
    >>> model.weight.is_meta
    True
"""

from .device_map import get_max_memory, infer_auto_device_map
from .dispatch import cpu_offload, disk_offload, dispatch_model, load_checkpoint_and_dispatch, load_checkpoint_in_model
from .empty import init_empty_weights, init_on_device
from .files import save_sharded
from .hooks import remove_hook_from_module
from .sizes import parse_size

__all__ = [
    "cpu_offload",
    "disk_offload",
    "dispatch_model",
    "get_max_memory",
    "infer_auto_device_map",
    "init_empty_weights",
    "init_on_device",
    "load_checkpoint_and_dispatch",
    "load_checkpoint_in_model",
    "parse_size",
    "remove_hook_from_module",
    "save_sharded",
]
