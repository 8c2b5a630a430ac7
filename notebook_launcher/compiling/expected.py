"""Whether a launched function will ``torch.compile``, read from its code before the ranks start.

Importing Inductor (``torch._inductor.compile_fx``) costs about 2.5 s of CPU, and torch with
dynamo 5 more: a rank forked from a kernel that has not imported them pays it on its own, N ranks
N times on the same cores (4 ranks on 2 cores: about 15 s before the first graph is even traced).
A kernel that imports them once before forking gives every rank a copy for free. Importing them
costs the kernel memory and seconds it should not pay for a launch that never compiles, so the
kernel does it only when the function's code says it compiles: a name ``compile`` (``torch.compile``,
``torch.compiler``), Accelerate's ``dynamo_backend=`` / ``dynamo_plugin=`` / ``TorchDynamoPlugin``,
or ``ACCELERATE_DYNAMO_BACKEND`` set in the kernel. The code read is the function's own, its
nested functions', and that of the functions and classes it names which were defined in the same
place (a notebook's cells, or the same module), a few levels deep: ``train`` calling a cell's
``build_model`` that compiles is found. A false "yes" costs one import; a false "no", the ranks'
imports as before.

Examples:
    >>> def train():
    ...     import torch
    ...     return torch.compile(torch.nn.Linear(2, 2))
    >>> compiles(train, environ={})
    True
    >>> compiles(lambda: sum([1, 2]), environ={})
    False
    >>> compiles(lambda: sum([1, 2]), environ={"ACCELERATE_DYNAMO_BACKEND": "inductor"})
    True
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Iterator, Mapping
from types import CodeType, FunctionType, MethodType
from typing import Any

__all__ = ["compiles", "COMPILER_MODULES"]

COMPILER_MODULES = ("torch", "torch._dynamo", "torch._inductor.compile_fx")  # what a compiling rank imports

_NAMES = frozenset({"compile", "compiler", "TorchDynamoPlugin", "dynamo_backend", "dynamo_plugin"})
_DEPTH = 3  # functions named by functions named by the launched one...
_LIMIT = 200  # code objects read at most: a huge module graph is not walked


def compiles(function: Callable[..., Any], environ: Mapping[str, str] = os.environ) -> bool:
    """Whether ``function``'s code (and that of what it calls from its own module) asks for
    ``torch.compile``, or the kernel's environment sets Accelerate's dynamo backend."""
    if environ.get("ACCELERATE_DYNAMO_BACKEND", "no").lower() not in ("", "no"):
        return True
    try:
        return any(_NAMES.intersection(_names(code)) for code in _codes(function))
    except Exception:  # a guess that saves time, never a reason for a launch to fail
        return False


def _codes(function: Callable[..., Any]) -> Iterator[CodeType]:
    """The code objects of ``function`` and of the functions and classes it names that were defined
    in its module, breadth first, each once."""
    root = _function(function)
    if root is None:
        return
    module = root.__module__
    seen: set[int] = set()
    level: list[Any] = [root]
    for _ in range(_DEPTH + 1):
        following: list[Any] = []
        for item in level:
            for code in _own_codes(item):
                if id(code) in seen or len(seen) >= _LIMIT:
                    continue
                seen.add(id(code))
                yield code
                following.extend(_named(item, code, module))
        level = following


def _function(item: Any) -> FunctionType | None:
    while isinstance(item, (MethodType, functools.partial)):
        item = item.__func__ if isinstance(item, MethodType) else item.func
    item = inspect.unwrap(item) if callable(item) else item
    if isinstance(item, FunctionType):
        return item
    call = vars(type(item)).get("__call__")  # an instance of a cell's class with a __call__
    return call if isinstance(call, FunctionType) else None


def _own_codes(item: Any) -> Iterator[CodeType]:
    """A function's code and its nested functions'; a class's methods' (a model whose __init__
    compiles its blocks)."""
    if isinstance(item, type):
        for member in vars(item).values():
            member = getattr(member, "__func__", member)
            if isinstance(member, FunctionType):
                yield from _nested(member.__code__)
    elif isinstance(item, FunctionType):
        yield from _nested(item.__code__)


def _nested(code: CodeType) -> Iterator[CodeType]:
    yield code
    for constant in code.co_consts:
        if isinstance(constant, CodeType):
            yield from _nested(constant)


def _names(code: CodeType) -> set[str]:
    """The names a code object uses, and the keyword names of its calls (kept among its constants)."""
    names = set(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, str):
            names.add(constant)
        elif isinstance(constant, tuple):
            names.update(value for value in constant if isinstance(value, str))
    return names


def _named(item: Any, code: CodeType, module: str) -> Iterator[Any]:
    """What ``code`` names among ``item``'s globals that was defined in ``module`` (the cells)."""
    namespace = getattr(item, "__globals__", None)
    if namespace is None and isinstance(item, type):
        namespace = getattr(inspect.getmodule(item), "__dict__", None)
    for name in code.co_names:
        value = (namespace or {}).get(name)
        if isinstance(value, (FunctionType, type)) and getattr(value, "__module__", None) == module:
            yield value
