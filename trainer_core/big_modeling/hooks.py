"""Hooks that make a dispatched model run: inputs follow the weights, offloaded weights arrive just in time.

``PlacementHook`` is attached to one module with torch's own forward pre/post hooks. Before the
module runs it moves the inputs to the module's execution device and, for weights kept elsewhere
(a CPU copy, or a file in the offload folder), puts them on that device; after it runs, those
weights are dropped again (back to the meta device), so only one offloaded layer is in memory at
a time. The model's root gets a hook that returns outputs on the first device.

Examples:
    >>> import torch
    >>> layer = torch.nn.Linear(2, 2)
    >>> attach(layer, PlacementHook("cpu"))
    >>> layer(torch.ones(1, 2)).shape
    torch.Size([1, 2])
    >>> _ = remove_hook_from_module(layer)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["PlacementHook", "attach", "remove_hook_from_module", "move_to", "set_tensor"]

_HOOK = "_big_modeling_hook"


def move_to(value: Any, device: torch.device) -> Any:
    """``value`` with every tensor inside (tuples, lists, dicts, dataclass-like outputs) on ``device``."""
    if isinstance(value, torch.Tensor):
        return value.to(device, non_blocking=True) if value.device != device else value
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple
        return type(value)(*(move_to(item, device) for item in value))
    if isinstance(value, list | tuple):
        return type(value)(move_to(item, device) for item in value)
    if isinstance(value, dict):
        moved = {key: move_to(item, device) for key, item in value.items()}
        try:
            return type(value)(moved)
        except TypeError:
            return moved
    return value


def set_tensor(module: torch.nn.Module, name: str, value: torch.Tensor) -> None:
    """Put ``value`` in place of ``module``'s direct parameter or buffer ``name``, keeping its kind."""
    if name in module._parameters:
        old = module._parameters[name]
        requires_grad = old.requires_grad if old is not None else False
        module._parameters[name] = torch.nn.Parameter(value, requires_grad=requires_grad and value.is_floating_point())
    else:
        module._buffers[name] = value


class PlacementHook:
    """Runs ``module`` on ``execution_device``; ``sources`` fetch its offloaded direct tensors."""

    def __init__(
        self,
        execution_device: torch.device | str | int,
        sources: dict[str, Callable[[], torch.Tensor]] | None = None,
        output_device: torch.device | str | int | None = None,
    ) -> None:
        self.execution_device = torch.device(
            f"cuda:{execution_device}" if isinstance(execution_device, int) else execution_device
        )
        self.sources = dict(sources or {})
        self.output_device = (
            None
            if output_device is None
            else torch.device(f"cuda:{output_device}" if isinstance(output_device, int) else output_device)
        )
        self.handles: list[Any] = []

    def before(self, module: torch.nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        for name, fetch in self.sources.items():
            set_tensor(module, name, fetch().to(self.execution_device))
        return move_to(args, self.execution_device), move_to(kwargs, self.execution_device)

    def after(self, module: torch.nn.Module, args: tuple, kwargs: dict, output: Any) -> Any:
        for name in self.sources:
            current = getattr(module, name)
            set_tensor(module, name, torch.empty(current.shape, dtype=current.dtype, device="meta"))
        return move_to(output, self.output_device) if self.output_device is not None else output


def attach(module: torch.nn.Module, hook: PlacementHook) -> None:
    """Attach ``hook`` to ``module`` (replacing one attached before)."""
    remove_hook_from_module(module)
    hook.handles = [
        module.register_forward_pre_hook(hook.before, with_kwargs=True),
        module.register_forward_hook(hook.after, with_kwargs=True),
    ]
    setattr(module, _HOOK, hook)


def remove_hook_from_module(module: torch.nn.Module, recurse: bool = False) -> torch.nn.Module:
    """Remove the hook ``dispatch_model`` attached (and those of submodules with ``recurse``).

    Offloaded weights stay where they are (on the meta device): load them again to run the module.
    """
    for each in module.modules() if recurse else [module]:
        hook = getattr(each, _HOOK, None)
        if hook is not None:
            for handle in hook.handles:
                handle.remove()
            delattr(each, _HOOK)
    return module
