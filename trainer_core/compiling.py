"""``torch.compile`` through the Accelerator, with Hugging Face Accelerate's options and semantics.

``Accelerator(dynamo_backend="inductor")`` or ``Accelerator(dynamo_plugin=TorchDynamoPlugin(...))``
(Accelerate's own plugin object is taken as it is) compiles each prepared model last, after the
strategy wrapped it (DDP) and the precision's autocast, as Accelerate does: ``backend``, ``mode``,
``fullgraph``, ``dynamic``, ``options`` and ``disable`` go to ``torch.compile``, and
``use_regional_compilation`` compiles each block of a repeated stack (a ``ModuleList`` of one
class: a transformer's layers) on its own, so one compile serves every layer. Unset fields are read
from ``ACCELERATE_DYNAMO_*``, as Accelerate reads them. A model compiled already is left as it is.

``unwrap`` takes the compile wrapper off (and back on with ``keep_torch_compile``), around the
strategy's own unwrapping, so ``unwrap_model`` and checkpoints see the user's module, with its
parameter names.

Examples:
    >>> settings = dynamo_settings("inductor", None)
    >>> settings.backend, settings.enabled, settings.compile_kwargs()["backend"]
    ('INDUCTOR', True, 'inductor')
    >>> dynamo_settings(None, None, environ={}).enabled
    False
    >>> model = compile_model(torch.nn.Sequential(torch.nn.Linear(2, 2)), dynamo_settings("eager", None))
    >>> is_compiled(model), unwrap(model)[1].__class__.__name__
    (True, 'Sequential')
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MethodType
from typing import Any, cast

import torch

__all__ = [
    "TorchDynamoPlugin",
    "DynamoSettings",
    "dynamo_settings",
    "compile_model",
    "compile_in_place",
    "compile_regions",
    "is_compiled",
    "unwrap",
]

_PREFIX = "ACCELERATE_DYNAMO_"
_TRUE = ("1", "true", "yes", "y", "on")


@dataclass
class TorchDynamoPlugin:
    """Accelerate's ``TorchDynamoPlugin``: the same fields, defaults and environment variables.

    Args:
        backend: a ``torch.compile`` backend ("inductor", "eager", "aot_eager", ...; "no": none).
        mode: "default", "reduce-overhead", "max-autotune", ...
        fullgraph: fail on a graph break instead of splitting the graph.
        dynamic: trace with dynamic shapes (None: torch decides).
        options: backend options (a dict).
        disable: compile nothing (a no-op ``torch.compile``).
        use_regional_compilation: compile each block of a repeated stack on its own.
    """

    backend: str | None = None
    mode: str | None = None
    fullgraph: bool | None = None
    dynamic: bool | None = None
    options: Any = None
    disable: bool = False
    use_regional_compilation: bool | None = None
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ, repr=False, compare=False)


@dataclass(frozen=True)
class DynamoSettings:
    """What the Accelerator compiles with, as ``accelerator.state.dynamo_plugin`` shows it (the
    backend in capitals, as Accelerate's enum value)."""

    backend: str = "NO"
    mode: str | None = "default"
    fullgraph: bool = False
    dynamic: bool | None = None
    options: Any = None
    disable: bool = False
    use_regional_compilation: bool = False

    @property
    def enabled(self) -> bool:
        return self.backend != "NO"

    def compile_kwargs(self) -> dict[str, Any]:
        """``torch.compile``'s keyword arguments, as Accelerate's ``to_kwargs`` gives them (``options``
        and ``disable`` only when set)."""
        kwargs = {
            "backend": self.backend.lower(),
            "mode": self.mode,
            "fullgraph": self.fullgraph,
            "dynamic": self.dynamic,
        }
        if self.options is not None:
            kwargs["options"] = self.options
        if self.disable:
            kwargs["disable"] = True
        return kwargs


def _flag(environ: Mapping[str, str], name: str) -> bool | None:
    value = environ.get(_PREFIX + name)
    return None if value is None else value.strip().lower() in _TRUE


def dynamo_settings(
    dynamo_backend: Any, dynamo_plugin: Any, environ: Mapping[str, str] | None = None
) -> DynamoSettings:
    """The settings ``Accelerator(dynamo_backend=..., dynamo_plugin=...)`` asks for: a plugin (ours or
    Accelerate's) wins, else the backend (a str or Accelerate's ``DynamoBackend``), else
    ``ACCELERATE_DYNAMO_*``.

    Raises:
        ValueError: both were given, or the backend is not one ``torch.compile`` knows.
    """
    if dynamo_backend is not None and dynamo_plugin is not None:
        raise ValueError("pass dynamo_backend or dynamo_plugin, not both")
    env = os.environ if environ is None else environ
    plugin = dynamo_plugin if dynamo_plugin is not None else TorchDynamoPlugin(backend=_name(dynamo_backend))
    backend = _name(getattr(plugin, "backend", None)) or env.get(_PREFIX + "BACKEND", "no")
    settings = DynamoSettings(
        backend=backend.upper(),
        mode=getattr(plugin, "mode", None) or env.get(_PREFIX + "MODE", "default"),
        fullgraph=bool(_first(getattr(plugin, "fullgraph", None), _flag(env, "USE_FULLGRAPH"), False)),
        dynamic=_first(getattr(plugin, "dynamic", None), _flag(env, "USE_DYNAMIC"), None),
        options=getattr(plugin, "options", None),
        disable=bool(getattr(plugin, "disable", False)),
        use_regional_compilation=bool(
            _first(getattr(plugin, "use_regional_compilation", None), _flag(env, "USE_REGIONAL_COMPILATION"), False)
        ),
    )
    if settings.enabled:
        known = [*torch._dynamo.list_backends(exclude_tags=()), "inductor"]
        if settings.backend.lower() not in known:
            raise ValueError(f"dynamo backend {settings.backend.lower()!r} is not one of {', '.join(sorted(known))}")
    return settings


def _name(backend: Any) -> str | None:
    """A backend's name, from a str or an enum (Accelerate's ``DynamoBackend.INDUCTOR``)."""
    if backend is None:
        return None
    return str(getattr(backend, "value", backend))


def _first(*values: Any) -> Any:
    return next((value for value in values if value is not None), None)


def _whole(model: torch.nn.Module) -> bool:
    """Whether ``model`` is ``torch.compile``'s wrapper (never so while dynamo is not even imported:
    asking would import it, seconds)."""
    dynamo = sys.modules.get("torch._dynamo.eval_frame")
    return dynamo is not None and isinstance(model, dynamo.OptimizedModule)


def is_compiled(model: torch.nn.Module) -> bool:
    """Whether ``model`` was compiled, whole or by regions (as Accelerate tells)."""
    return _whole(model) or "_orig_mod" in model.__dict__


def compile_model(model: torch.nn.Module, settings: DynamoSettings) -> torch.nn.Module:
    """``model`` compiled as ``settings`` say (whole, or by regions); a compiled one as it is."""
    if not settings.enabled or is_compiled(model):
        return model
    if settings.use_regional_compilation:
        return compile_regions(model, **settings.compile_kwargs())
    return _compiled(model, settings.compile_kwargs())


def _compiled(module: torch.nn.Module, compile_kwargs: Mapping[str, Any]) -> torch.nn.Module:
    return cast(torch.nn.Module, torch.compile(module, **compile_kwargs))


def _repeated(module: torch.nn.Module) -> bool:
    return (
        isinstance(module, torch.nn.ModuleList)
        and len(module) > 0
        and all(type(block) is type(module[0]) for block in module)
    )


def _holds_repeated(module: torch.nn.Module) -> bool:
    return any(_repeated(sub) for sub in module.modules())


def compile_in_place(model: torch.nn.Module, settings: DynamoSettings) -> None:
    """``model.compile()`` (the module itself stays: a sharded FSDP2 model), or with regional
    compilation each block of a repeated stack and each other leaf region."""
    if not settings.enabled or is_compiled(model):
        return
    kwargs = settings.compile_kwargs()
    if not settings.use_regional_compilation:
        model.compile(**kwargs)
        return

    def regions(part: torch.nn.Module) -> None:
        if _repeated(part):
            for block in cast(torch.nn.ModuleList, part):
                block.compile(**kwargs)
        elif _holds_repeated(part):
            for child in part.children():
                regions(child)
        else:
            part.compile(**kwargs)

    regions(model)


def compile_regions(module: torch.nn.Module, **compile_kwargs: Any) -> torch.nn.Module:
    """A copy of ``module``'s structure in which every block of a repeated stack is compiled on its
    own and every other leaf region compiled once; the parameters are ``module``'s own. The copy
    keeps ``module`` as ``_orig_mod`` (``unwrap`` gives it back).

    Examples:
        >>> stack = torch.nn.Sequential(torch.nn.ModuleList([torch.nn.Linear(2, 2) for _ in range(3)]))
        >>> regional = compile_regions(stack, backend="eager")
        >>> [type(block).__name__ for block in regional[0]], regional._orig_mod is stack
        (['OptimizedModule', 'OptimizedModule', 'OptimizedModule'], True)
    """

    def regions(part: torch.nn.Module) -> torch.nn.Module:
        if _repeated(part):
            return torch.nn.ModuleList(_compiled(block, compile_kwargs) for block in cast(torch.nn.ModuleList, part))
        if not _holds_repeated(part):
            return _compiled(part, compile_kwargs)
        copy = part.__class__.__new__(part.__class__)
        copy.__dict__.update(part.__dict__)
        for name, value in list(copy.__dict__.items()):  # methods bound to ``part`` (a wrapped forward)
            if getattr(value, "__self__", None) is part and hasattr(value, "__func__"):
                copy.__dict__[name] = MethodType(value.__func__, copy)
        copy._modules = {}
        for name, child in part.named_children():
            copy.add_module(name, regions(child))
        return copy

    compiled = regions(module)
    if "_orig_mod" not in compiled.__dict__:
        compiled.__dict__["_orig_mod"] = module
    return compiled


def unwrap(model: torch.nn.Module) -> tuple[Callable[[torch.nn.Module], torch.nn.Module], torch.nn.Module]:
    """(``rewrap``, what the compile wrapper held): ``model`` without ``torch.compile``'s wrapper
    (whole or regional), and a function that puts that wrapper around a module, pointing it at that
    module as Accelerate's ``unwrap_model(keep_torch_compile=True)`` does. Not compiled: ``model``."""
    if _whole(model):
        compiled = model

        def rewrap_whole(module: torch.nn.Module) -> torch.nn.Module:
            compiled._orig_mod = module
            return compiled

        return rewrap_whole, cast(torch.nn.Module, model._orig_mod)
    if "_orig_mod" in model.__dict__:
        regional = model

        def rewrap_regions(module: torch.nn.Module) -> torch.nn.Module:
            regional.__dict__["_orig_mod"] = module
            return regional

        return rewrap_regions, model.__dict__["_orig_mod"]
    return (lambda module: module), model
