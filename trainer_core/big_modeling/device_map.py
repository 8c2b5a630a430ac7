"""Where each part of a model goes: devices found, memory budgets, and the automatic device map.

A device map is ``{module or tensor name: device}`` with devices GPU indices (``0``, ``1``),
``"cpu"`` or ``"disk"``; ``""`` names the whole model. ``infer_auto_device_map`` fills the GPUs in
order, then the CPU, then the disk, splitting a module that does not fit into its children (never a
module of a ``no_split_module_classes`` class), and keeps room for the largest layer on the first
device once anything is offloaded, since offloaded layers run there.

GPUs are counted and measured without initializing CUDA (``nvidia-smi``, as the launcher's
inventory does), so a kernel that maps a model can still fork ranks.

Examples:
    >>> import torch
    >>> model = torch.nn.Sequential(*[torch.nn.Linear(100, 100) for _ in range(4)])   # 40,400 B each
    >>> infer_auto_device_map(model, max_memory={"cpu": 100_000})
    {'0': 'cpu', '1': 'disk', '2': 'disk', '3': 'disk'}
"""

from __future__ import annotations

import math
import sys
from typing import Any

import torch

from .sizes import format_size, module_sizes, parse_size, tensor_bytes

__all__ = [
    "infer_auto_device_map",
    "get_max_memory",
    "check_device_map",
    "gpu_count",
    "normalize_device",
    "placement",
    "as_dtype",
]

Device = int | str


def gpu_count() -> int:
    """Visible CUDA GPUs, counted without initializing CUDA."""
    torch_cuda = sys.modules.get("torch.cuda")
    if torch_cuda is not None and torch.cuda.is_initialized():
        return torch.cuda.device_count()
    from ..hardware import cuda_gpus

    return len(cuda_gpus())


def normalize_device(device: Any, gpus: int | None = None) -> Device:
    """``0``, ``"cuda:0"``, ``torch.device("cuda", 0)`` → ``0``; ``"cpu"``; ``"disk"``; anything
    else, or a GPU that is not there, is a ValueError naming the devices found."""
    gpus = gpu_count() if gpus is None else gpus
    given = device
    if isinstance(device, torch.device):
        device = str(device)
    if isinstance(device, str) and device.startswith("cuda"):
        index = device.partition(":")[2]
        device = int(index) if index.isdigit() else 0
    if isinstance(device, int) and not isinstance(device, bool) and 0 <= device < gpus:
        return device
    if device in ("cpu", "disk"):
        return device
    found = [*range(gpus), "cpu", "disk"]
    raise ValueError(f"the device map names device {given!r}, which is not here: the devices are {found}")


def get_max_memory(max_memory: dict | None = None) -> dict[Device, float]:
    """Bytes each device may take, GPUs first, then "cpu", then "disk" (unbounded unless given).

    Without ``max_memory``: 90 % of each GPU's memory (its free memory when CUDA is already
    initialized) and the CPU memory available now. With it: only the devices it names (values in
    bytes or strings such as "10GiB"), and the disk.
    """
    gpus = gpu_count()
    if max_memory is None:
        memory: dict[Device, float] = {}
        for index, total in enumerate(_gpu_memory(gpus)):
            memory[index] = total
        import psutil

        memory["cpu"] = psutil.virtual_memory().available
    else:
        memory = {normalize_device(device, gpus): parse_size(size) for device, size in max_memory.items()}
    memory.setdefault("disk", math.inf)
    order = sorted(d for d in memory if isinstance(d, int)) + [d for d in ("cpu", "disk") if d in memory]
    return {device: memory[device] for device in order}


def _gpu_memory(gpus: int) -> list[int]:
    if gpus and torch.cuda.is_initialized():
        return [torch.cuda.mem_get_info(index)[0] for index in range(gpus)]
    from ..hardware import cuda_gpus

    return [int((gpu["memory_mib"] or 0) * 2**20 * 0.9) for gpu in cuda_gpus()[:gpus]]


def infer_auto_device_map(
    model: torch.nn.Module,
    max_memory: dict | None = None,
    no_split_module_classes: list[str] | None = None,
    dtype: torch.dtype | str | None = None,
    balanced: bool = False,
) -> dict[str, Device]:
    """A device map for ``model``: GPUs in order, then CPU, then disk (see the module docstring).

    Args:
        model: built for real or on the meta device (``init_empty_weights``): only shapes count.
        max_memory: bytes per device (``{0: "10GiB", "cpu": "30GiB"}``); default: what is free.
        no_split_module_classes: class names whose modules stay whole (a transformer block with a
            residual connection).
        dtype: the dtype the weights will be loaded in (sizes floating tensors accordingly).
        balanced: spread the model evenly over the GPUs instead of filling the first ones.

    Examples:
        >>> infer_auto_device_map(torch.nn.Linear(4, 4), max_memory={"cpu": "1MB"})
        {'': 'cpu'}
    """
    dtype = as_dtype(dtype)
    no_split = set(no_split_module_classes or [])
    sizes = module_sizes(model, dtype)
    memory = get_max_memory(max_memory)
    if balanced:
        memory = _balanced(memory, sizes[""], _largest_layer(model, sizes, no_split))
    device_map = _fill(model, sizes, no_split, memory, reserve=0)
    first = next(iter(memory))
    if any(device != first for device in device_map.values()):  # offloaded layers run on the first device
        device_map = _fill(model, sizes, no_split, memory, reserve=_largest_layer(model, sizes, no_split))
    return _merge(model, device_map)


def as_dtype(dtype: torch.dtype | str | None) -> torch.dtype | None:
    """``dtype`` as a torch dtype ("float16", "torch.bfloat16" or a dtype; None stays None)."""
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    name = dtype.replace("torch.", "")
    found = getattr(torch, name, None)
    if not isinstance(found, torch.dtype):
        raise ValueError(f"{dtype!r} is not a torch dtype")
    return found


def _units(module: torch.nn.Module, prefix: str) -> list[tuple[str, Any]]:
    """A module's own tensors, then its children: what it splits into."""
    own = [
        (f"{prefix}{name}", tensor)
        for name, tensor in [*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)]
    ]
    children = [(f"{prefix}{name}", child) for name, child in module.named_children()]
    return own + children


def _largest_layer(model: torch.nn.Module, sizes: dict[str, int], no_split: set[str]) -> int:
    """The biggest piece that must be on one device at once: a no-split module or a leaf's tensors."""
    largest = 0
    for name, module in model.named_modules():
        if type(module).__name__ in no_split:
            largest = max(largest, sizes.get(name, 0))
        else:
            own = sum(tensor_bytes(t) for t in [*module.parameters(recurse=False), *module.buffers(recurse=False)])
            largest = max(largest, own)
    return largest


def _balanced(memory: dict[Device, float], total: int, largest: int) -> dict[Device, float]:
    gpus = [device for device in memory if isinstance(device, int)]
    if len(gpus) < 2:
        return memory
    share = math.ceil(total / len(gpus)) + largest
    return {device: min(limit, share) if device in gpus[:-1] else limit for device, limit in memory.items()}


def _fill(
    model: torch.nn.Module, sizes: dict[str, int], no_split: set[str], memory: dict[Device, float], reserve: int
) -> dict[str, Device]:
    devices = list(memory)
    queue: list[tuple[str, Any]] = [("", model)]
    device_map: dict[str, Device] = {}
    index, used = 0, 0
    while queue:
        name, item = queue.pop(0)
        is_module = isinstance(item, torch.nn.Module)
        size = sizes.get(name, 0) if is_module else tensor_bytes(item)
        device = devices[index]
        limit = memory[device] - (reserve if index == 0 else 0)
        if used + size <= limit:
            device_map[name] = device
            used += size
            continue
        if is_module and type(item).__name__ not in no_split and _units(item, ""):
            queue[:0] = _units(item, f"{name}." if name else "")
            continue
        index, used = index + 1, 0
        if index == len(devices):  # only when "disk" is bounded by max_memory
            budget = ", ".join(f"{d}: {format_size(int(m))}" for d, m in memory.items())
            raise ValueError(
                f"the model ({format_size(sizes[''])}) does not fit in max_memory ({budget}):"
                f" {name or 'the model'} ({format_size(size)}) has nowhere to go"
            )
        queue.insert(0, (name, item))
    return device_map


def _merge(model: torch.nn.Module, device_map: dict[str, Device]) -> dict[str, Device]:
    """Name a module once when all its parts went to the same device."""
    merged = dict(device_map)
    names = sorted((name for name, _ in model.named_modules() if name), key=lambda n: -n.count("."))
    for name in [*names, ""]:
        if name in merged:
            continue
        module = model.get_submodule(name)
        parts = [part for part, _ in _units(module, f"{name}." if name else "")]
        if parts and all(part in merged for part in parts):
            devices = {merged[part] for part in parts}
            if len(devices) == 1:
                for part in parts:
                    del merged[part]
                merged[name] = devices.pop()
    return {name: merged[name] for name in _in_model_order(model, merged)}


def _in_model_order(model: torch.nn.Module, device_map: dict[str, Device]) -> list[str]:
    order = {name: index for index, (name, _) in enumerate([*model.named_modules(), *model.named_parameters()])}
    return sorted(device_map, key=lambda name: order.get(name, len(order)))


def check_device_map(model: torch.nn.Module, device_map: dict) -> dict[str, Device]:
    """A user's device map, checked: every device exists and every weight of the model is placed.

    Raises:
        ValueError: a device that is not here, or weights the map does not place (listed).
    """
    gpus = gpu_count()
    checked = {name: normalize_device(device, gpus) for name, device in device_map.items()}
    names = [name for name, _ in [*model.named_parameters(), *model.named_buffers()]]
    unplaced = [name for name in names if placement(checked, name) is None]
    if unplaced:
        shown = ", ".join(unplaced[:10]) + (f" and {len(unplaced) - 10} more" if len(unplaced) > 10 else "")
        raise ValueError(f"the device map does not place {shown}")
    return checked


def placement(device_map: dict[str, Device], name: str) -> Device | None:
    """The device of tensor or module ``name``: its longest prefix in the map."""
    while True:
        if name in device_map:
            return device_map[name]
        if not name:
            return None
        name = name.rpartition(".")[0]
