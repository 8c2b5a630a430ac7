"""Put a model where a device map says and make it run there; load a checkpoint straight into place.

``load_checkpoint_and_dispatch`` is the whole path for a model bigger than memory: build it with
``init_empty_weights``, then this reads the checkpoint one tensor at a time and puts each where the
map says (a GPU, the CPU, or a file in the offload folder), so peak host memory is what stays on
the CPU plus one tensor, and attaches the hooks (``hooks``) so ``model(x)`` just works.

Examples:
    >>> import tempfile, torch
    >>> from trainer_core.big_modeling import init_empty_weights, save_sharded
    >>> folder = tempfile.mkdtemp()
    >>> trained = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    >>> _ = save_sharded(trained.state_dict(), folder)
    >>> with init_empty_weights():
    ...     model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    >>> model = load_checkpoint_and_dispatch(model, folder, device_map={"0": "cpu", "2": "disk"},
    ...                                      offload_folder=tempfile.mkdtemp())
    >>> x = torch.randn(3, 8)
    >>> torch.equal(model(x), trained(x))
    True
"""

from __future__ import annotations

import os
from typing import Any

import torch

from .device_map import as_dtype, check_device_map, gpu_count, infer_auto_device_map, placement
from .files import checkpoint_files, checkpoint_keys, iter_tensors
from .hooks import PlacementHook, attach, set_tensor
from .offload import OffloadFolder

__all__ = [
    "tied_groups",
    "dispatch_model",
    "load_checkpoint_and_dispatch",
    "load_checkpoint_in_model",
    "cpu_offload",
    "disk_offload",
]

DEVICE_MAP_CHOICES = ("auto", "balanced", "sequential")


def _torch_device(device: int | str) -> torch.device:
    return torch.device(f"cuda:{device}" if isinstance(device, int) else device)


def _main_device(device_map: dict[str, Any]) -> int | str:
    gpus = sorted(d for d in device_map.values() if isinstance(d, int))
    return gpus[0] if gpus else "cpu"


def tied_groups(model: torch.nn.Module) -> list[list[str]]:
    """The names under which each tied parameter appears, for parameters with more than one."""
    groups: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(param), []).append(name)
    return [names for names in groups.values() if len(names) > 1]


def _owner(model: torch.nn.Module, name: str) -> tuple[torch.nn.Module, str]:
    module_name, _, attr = name.rpartition(".")
    return (model.get_submodule(module_name) if module_name else model), attr


def load_checkpoint_in_model(
    model: torch.nn.Module,
    checkpoint: str | os.PathLike,
    device_map: dict | None = None,
    offload_folder: str | os.PathLike | None = None,
    dtype: torch.dtype | str | None = None,
    strict: bool = True,
) -> None:
    """Load ``checkpoint`` into ``model`` (built for real or with ``init_empty_weights``), tensor by
    tensor, each to its place in ``device_map`` (default: all on the CPU); "disk" tensors go to
    ``offload_folder``.

    Raises:
        ValueError: the checkpoint's keys do not match the model's (missing and unexpected listed),
            or the map offloads to disk without an ``offload_folder``.
    """
    dtype = as_dtype(dtype)
    _check_dtype(dtype, device_map)
    device_map = check_device_map(model, device_map if device_map is not None else {"": "cpu"})
    files = checkpoint_files(checkpoint)
    tied = tied_groups(model)
    aliases = {name for group in tied for name in group[1:]}
    expected = [name for name, _ in model.named_parameters()] + [
        name for name, _ in model.named_buffers() if _persistent(model, name)
    ]
    found = checkpoint_keys(files)
    missing = [name for name in expected if name not in set(found) and name not in aliases]
    unexpected = [name for name in found if name not in set(expected) and name not in aliases]
    if strict and (missing or unexpected):
        raise ValueError(
            f"the checkpoint does not match the model: {_listed('missing', missing)}; "
            f"{_listed('unexpected', unexpected)}"
        )
    folder = None
    if "disk" in device_map.values():
        if offload_folder is None:
            raise ValueError("the device map puts weights on disk: pass offload_folder= (a folder for them)")
        folder = OffloadFolder(offload_folder)
    for name, tensor in iter_tensors(files):
        if name not in set(expected) and name not in aliases:
            continue
        if dtype is not None and tensor.is_floating_point():
            tensor = tensor.to(dtype)
        device = placement(device_map, name)
        if device == "disk":
            assert folder is not None
            folder.write(name, tensor)
            module, attr = _owner(model, name)
            set_tensor(module, attr, torch.empty(tensor.shape, dtype=tensor.dtype, device="meta"))
        else:
            module, attr = _owner(model, name)
            set_tensor(module, attr, tensor.to(_torch_device(device if device is not None else "cpu")))
    if folder is not None:
        folder.flush()
    _retie(model, tied)


def _persistent(model: torch.nn.Module, name: str) -> bool:
    module, attr = _owner(model, name)
    return attr not in module._non_persistent_buffers_set


def _retie(model: torch.nn.Module, tied: list[list[str]]) -> None:
    for group in tied:
        module, attr = _owner(model, group[0])
        param = module._parameters[attr]
        for other in group[1:]:
            owner, other_attr = _owner(model, other)
            owner._parameters[other_attr] = param


def _listed(what: str, names: list[str]) -> str:
    if not names:
        return f"no {what} keys"
    shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
    return f"{len(names)} {what}: {shown}"


def _check_dtype(dtype: torch.dtype | None, device_map: dict | None) -> None:
    if dtype is None:
        return
    if not dtype.is_floating_point:
        raise ValueError(
            f"dtype={dtype} is not a floating dtype: weights can be loaded as float32, float16 or bfloat16"
        )
    on_gpu = device_map is not None and any(
        isinstance(d, int) or str(d).startswith("cuda") for d in device_map.values()
    )
    if dtype.itemsize == 1 and not on_gpu:
        raise ValueError(f"dtype={dtype} cannot run matrix products on the CPU; use bfloat16 or float32")


def dispatch_model(
    model: torch.nn.Module,
    device_map: dict,
    main_device: int | str | None = None,
    offload_dir: str | os.PathLike | None = None,
) -> torch.nn.Module:
    """Place ``model``'s weights as ``device_map`` says and attach the hooks that run it there.

    Weights mapped to a GPU move there; to "cpu", they stay on the CPU (and, when the model's main
    device is a GPU, come to it just in time); to "disk", they are written to ``offload_dir``
    (unless a load already put them there) and mapped in when their module runs. Outputs come back
    on ``main_device`` (default: the first GPU in the map, else the CPU).
    """
    device_map = check_device_map(model, device_map)
    tied = tied_groups(model)
    main = main_device if main_device is not None else _main_device(device_map)
    main_torch = _torch_device(main)
    folder = OffloadFolder(offload_dir) if offload_dir is not None else None
    if folder is None and "disk" in device_map.values():
        raise ValueError("the device map puts weights on disk: pass offload_dir= (a folder for them)")
    for module_name, module in model.named_modules():
        owned = [*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)]
        sources: dict[str, Any] = {}
        for attr, tensor in owned:
            name = f"{module_name}.{attr}" if module_name else attr
            source = _place(module, attr, tensor, name, placement(device_map, name), main, folder)
            if source is not None:
                sources[attr] = source
        if sources or module_name in device_map or module_name == "":
            execution = execution_device(device_map.get(module_name, main), main, bool(sources))
            attach(module, PlacementHook(execution, sources, output_device=main_torch if module_name == "" else None))
    if folder is not None:
        folder.flush()
    _retie(
        model, [group for group in tied if not getattr(_owner(model, group[0])[0], group[0].rpartition(".")[2]).is_meta]
    )
    model.hf_device_map = dict(device_map)  # type: ignore[assignment]
    return model


def execution_device(placed: int | str, main: int | str, fetched: bool) -> int | str:
    """Where a module placed on ``placed`` runs: on its GPU when it lives on one; on the main device
    when its weights are fetched just in time (``fetched``) or it lives on the CPU or disk (a block
    mapped to "cpu" runs on the GPU when the model has one, as each of its layers does, so the
    block's own inputs, such as a residual, must go there too).

    Examples:
        >>> execution_device("cpu", 0, fetched=False), execution_device(1, 0, fetched=False)
        (0, 1)
        >>> execution_device("cpu", "cpu", fetched=False), execution_device("disk", "cpu", fetched=True)
        ('cpu', 'cpu')
    """
    return main if fetched or placed in ("cpu", "disk") else placed


def _place(
    module: torch.nn.Module,
    attr: str,
    tensor: torch.Tensor,
    name: str,
    device: Any,
    main: Any,
    folder: OffloadFolder | None,
) -> Any:
    """Put one weight where the map says; returns how to fetch it just in time (None: it stays put)."""
    if device == "disk":
        assert folder is not None
        if name not in folder:
            folder.write(name, tensor)
        set_tensor(module, attr, torch.empty(tensor.shape, dtype=tensor.dtype, device="meta"))
        return _reader(folder, name)
    if device == "cpu" and main != "cpu":
        kept = tensor.to("cpu")
        set_tensor(module, attr, torch.empty(tensor.shape, dtype=tensor.dtype, device="meta"))
        return _keeper(kept)
    if tensor.device.type == "meta":
        raise ValueError(f"{name} has no weights (meta device): load a checkpoint first")
    target = _torch_device(device if device is not None else "cpu")
    if tensor.device != target:
        set_tensor(module, attr, tensor.to(target))
    return None


def _reader(folder: OffloadFolder, name: str) -> Any:
    return lambda: folder.read(name)


def _keeper(tensor: torch.Tensor) -> Any:
    return lambda: tensor


def load_checkpoint_and_dispatch(
    model: torch.nn.Module,
    checkpoint: str | os.PathLike,
    device_map: str | dict | None = "auto",
    max_memory: dict | None = None,
    no_split_module_classes: list[str] | None = None,
    offload_folder: str | os.PathLike | None = None,
    dtype: torch.dtype | str | None = None,
) -> torch.nn.Module:
    """Load ``checkpoint`` into ``model`` (best built with ``init_empty_weights``) one tensor at a
    time, each where ``device_map`` says, and make the model run there (see the module docstring).

    Args:
        device_map: "auto"/"balanced" (spread over the GPUs, then CPU, then disk), "sequential"
            (fill the GPUs in order), a dict, or None (everything on the CPU).
        max_memory: bytes per device for the automatic maps (``{0: "10GiB", "cpu": "150MB"}``).
        no_split_module_classes: class names never split across devices.
        offload_folder: where "disk" weights go (required when the map uses the disk).
        dtype: load floating weights in this dtype.

    Raises:
        ValueError: an unknown map name or device, keys that do not match, disk without a folder.
    """
    if isinstance(device_map, str):
        if device_map not in DEVICE_MAP_CHOICES:
            raise ValueError(f"device_map={device_map!r} is not valid; use one of {DEVICE_MAP_CHOICES} or a dict")
        device_map = infer_auto_device_map(
            model,
            max_memory=max_memory,
            no_split_module_classes=no_split_module_classes,
            dtype=dtype,
            balanced=device_map != "sequential" and gpu_count() > 1,
        )
        if "disk" in device_map.values() and offload_folder is None:
            on_disk = [name for name, device in device_map.items() if device == "disk"]
            raise ValueError(
                f"the model does not fit in {'max_memory' if max_memory else 'the memory available'}:"
                f" {len(on_disk)} part(s) ({', '.join(on_disk[:5])}{', ...' if len(on_disk) > 5 else ''})"
                " would go to disk; pass offload_folder= or give it more memory"
            )
    elif device_map is None:
        device_map = {"": "cpu"}
    load_checkpoint_in_model(model, checkpoint, device_map, offload_folder, dtype)
    return dispatch_model(model, device_map, offload_dir=offload_folder)


def cpu_offload(model: torch.nn.Module, execution_device: int | str | None = None) -> torch.nn.Module:
    """Keep every weight on the CPU and bring each layer's to ``execution_device`` (default: the
    first GPU, else the CPU) only while it runs."""
    main = execution_device if execution_device is not None else (0 if gpu_count() else "cpu")
    return dispatch_model(model, {"": "cpu"}, main_device=main)


def disk_offload(
    model: torch.nn.Module, offload_dir: str | os.PathLike, execution_device: int | str | None = None
) -> torch.nn.Module:
    """Write every weight to ``offload_dir`` and map each layer's in only while it runs."""
    main = execution_device if execution_device is not None else (0 if gpu_count() else "cpu")
    return dispatch_model(model, {"": "disk"}, main_device=main, offload_dir=offload_dir)
