"""Run a function right after a module is imported, without importing it earlier.

Used to record where CUDA gets initialized (as soon as ``torch`` is imported) and, inside ranks,
to turn tqdm's notebook bars into text bars whenever the rank imports them. The module itself is
found and loaded by the usual finders; only its loader is wrapped.

Examples:
    >>> import sys
    >>> seen = []
    >>> after_import("colorsys", lambda module: seen.append(module.__name__))
    >>> sys.modules.pop("colorsys", None) and None
    >>> import colorsys
    >>> seen
    ['colorsys']
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

__all__ = ["after_import"]

_callbacks: dict[str, list[Callable[[ModuleType], None]]] = {}
_looking = threading.local()


def after_import(name: str, callback: Callable[[ModuleType], None]) -> None:
    """Call ``callback(module)`` once module ``name`` has been imported (now, if it already is).

    The callback runs once; a failing callback never breaks the import.
    """
    module = sys.modules.get(name)
    if module is not None:
        _call(callback, module)
        return
    _callbacks.setdefault(name, []).append(callback)
    if not any(isinstance(finder, _AfterImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport())


def _call(callback: Callable[[ModuleType], None], module: ModuleType) -> None:
    try:
        callback(module)
    except Exception:  # a convenience must never break the user's import
        pass


class _AfterImport:
    """Finds a watched module through the other finders and wraps its loader."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in _callbacks or getattr(_looking, "name", None) == name:
            return None
        _looking.name = name
        try:
            spec = importlib.util.find_spec(name)
        finally:
            _looking.name = None
        if spec is not None and spec.loader is not None:
            spec.loader = _CallAfter(spec.loader, _callbacks.pop(name))  # type: ignore[assignment]
        return spec


class _CallAfter:
    def __init__(self, loader: Any, callbacks: list[Callable[[ModuleType], None]]) -> None:
        self._loader = loader
        self._callbacks = callbacks

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        for callback in self._callbacks:
            _call(callback, module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)
