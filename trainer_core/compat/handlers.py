"""Accelerate-style kwargs handlers: options for the objects the Accelerator makes.

Matched by class name, so Accelerate's own handler classes work as they are (``to_kwargs()`` gives
the values set):

- ``DistributedDataParallelKwargs``: DDP options for prepared models, and its communication hook
  (``comm_hook`` fp16/bf16/power_sgd/batched_power_sgd, ``comm_wrapper``, ``comm_state_option``),
  registered on every DDP model as Accelerate does;
- ``GradScalerKwargs``: the fp16 GradScaler's options;
- ``InitProcessGroupKwargs``: the process group's timeout, when the Accelerator creates the group;
- ``AutocastKwargs``: the default ``enabled``/``cache_enabled`` of every autocast (the prepared
  model's forward and ``accelerator.autocast()``);
- ``ProfileKwargs``: what ``accelerator.profile()`` records.

The FP8 recipes (``FP8RecipeKwargs``, ``TERecipeKwargs``, ``MSAMPRecipeKwargs``, ``AORecipeKwargs``)
are refused with the reason: trainer_core has no FP8 training.

Examples:
    >>> class DistributedDataParallelKwargs:
    ...     def to_kwargs(self): return {"find_unused_parameters": True}
    >>> handlers = Handlers.from_list([DistributedDataParallelKwargs()])
    >>> handlers.ddp, handlers.comm_hook, handlers.timeout
    ({'find_unused_parameters': True}, None, None)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Handlers", "comm_hook_of"]

# handler class name -> the Accelerator attribute Accelerate keeps it under
ATTRIBUTES = {
    "DistributedDataParallelKwargs": "ddp_handler",
    "GradScalerKwargs": "scaler_handler",
    "InitProcessGroupKwargs": "init_handler",
    "AutocastKwargs": "autocast_handler",
    "ProfileKwargs": "profile_handler",
}

FP8 = ("FP8RecipeKwargs", "TERecipeKwargs", "MSAMPRecipeKwargs", "AORecipeKwargs")


def _values(handler: Any) -> dict:
    return handler.to_kwargs() if hasattr(handler, "to_kwargs") else dict(vars(handler))


def _choice(value: Any) -> str:
    return str(getattr(value, "value", value) or "no").lower()


def comm_hook_of(handler: Any) -> tuple[Any, Any] | None:
    """``(state, hook)`` for ``DistributedDataParallel.register_comm_hook`` from a DDP handler's
    ``comm_hook``/``comm_wrapper``/``comm_state_option``, or None for "no" (torch's own hooks).

    Examples:
        >>> class DistributedDataParallelKwargs:
        ...     comm_hook, comm_wrapper, comm_state_option = "fp16", "no", {}
        >>> state, hook = comm_hook_of(DistributedDataParallelKwargs())
        >>> state, hook.__name__
        (None, 'fp16_compress_hook')
    """
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    hooks: dict[str, Any] = {
        "fp16": default_hooks.fp16_compress_hook,
        "bf16": default_hooks.bf16_compress_hook,
        "power_sgd": powerSGD_hook.powerSGD_hook,
        "batched_power_sgd": powerSGD_hook.batched_powerSGD_hook,
    }
    wrappers: dict[str, Any] = {
        "fp16": default_hooks.fp16_compress_wrapper,
        "bf16": default_hooks.bf16_compress_wrapper,
    }
    name = _choice(getattr(handler, "comm_hook", "no"))
    wrapper = _choice(getattr(handler, "comm_wrapper", "no"))
    if name == "no":
        if wrapper != "no":
            raise ValueError(f"comm_wrapper={wrapper!r} wraps a comm_hook: set comm_hook too")
        return None
    if name not in hooks:
        raise ValueError(f"comm_hook={name!r} is not a DDP communication hook; use one of {sorted(hooks)} or 'no'")
    if wrapper not in ("no", *wrappers):
        raise ValueError(f"comm_wrapper={wrapper!r} is not a hook wrapper; use one of {sorted(wrappers)} or 'no'")
    hook = hooks[name]
    if wrapper != "no":
        hook = wrappers[wrapper](hook)
    state = None
    if "power_sgd" in name:
        state = powerSGD_hook.PowerSGDState(None, **(getattr(handler, "comm_state_option", None) or {}))
    return state, hook


@dataclass
class Handlers:
    """What ``kwargs_handlers`` set, sorted by what it is for."""

    ddp: dict = field(default_factory=dict)
    comm_hook: tuple[Any, Any] | None = None
    scaler: dict = field(default_factory=dict)
    timeout: Any = None
    autocast: dict = field(default_factory=dict)
    objects: dict = field(default_factory=dict)  # Accelerate's attribute name -> the handler

    @classmethod
    def from_list(cls, handlers: list | None) -> Handlers:
        """Sort ``kwargs_handlers``; an unknown handler, a repeated kind, or an FP8 recipe raise."""
        result = cls()
        for handler in handlers or []:
            name = type(handler).__name__
            if name in FP8:
                raise ValueError(
                    f"kwargs handler {name}: trainer_core does not train in FP8 (it needs an FP8 GPU and"
                    " TransformerEngine, MS-AMP or torchao); use mixed_precision='bf16' or 'fp16'"
                )
            if name not in ATTRIBUTES:
                raise ValueError(f"kwargs handler {name} is not supported: use one of {sorted(ATTRIBUTES)}")
            if ATTRIBUTES[name] in result.objects:
                raise ValueError(f"kwargs_handlers holds two {name}: pass one")
            result.objects[ATTRIBUTES[name]] = handler
            _TAKE.get(name, lambda result, handler: None)(result, handler)
        for key in ("comm_hook", "comm_wrapper", "comm_state_option"):  # our own handler objects
            result.ddp.pop(key, None)
        return result


def _take_ddp(result: Handlers, handler: Any) -> None:
    result.ddp.update(_values(handler))
    result.comm_hook = comm_hook_of(handler)


def _take_autocast(result: Handlers, handler: Any) -> None:
    result.autocast = {"enabled": handler.enabled}
    if getattr(handler, "cache_enabled", None) is not None:
        result.autocast["cache_enabled"] = handler.cache_enabled


_TAKE = {
    "DistributedDataParallelKwargs": _take_ddp,
    "GradScalerKwargs": lambda result, handler: result.scaler.update(_values(handler)),
    "InitProcessGroupKwargs": lambda result, handler: setattr(result, "timeout", _values(handler).get("timeout")),
    "AutocastKwargs": _take_autocast,
}
