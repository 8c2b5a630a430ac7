"""Where ranks run: one package per backend, found by name in a lazy registry.

``launch(..., cluster=None)`` runs ranks with the ``local`` backend (processes on this machine);
``cluster="ray"`` or ``"ray://host:10001"`` with the ``ray`` backend. The part of ``cluster``
before ``://`` names the backend. A backend is imported only when a launch (or the sidebar) asks
for it; a new one is registered with ``register_backend`` or, from an installed package, with an
entry point in the ``notebook_launcher.backends`` group (``name = "package.module:BackendClass"``).
The ``Backend`` interface is in ``backends.base``.

Examples:
    >>> backend_for(None).name, backend_for("ray://head:10001").name
    ('local', 'ray')
    >>> registered_backends()[:2]
    ['local', 'ray']
    >>> backend_for("slurm")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: cluster='slurm' names no backend; registered: 'local' (cluster=None), 'ray'...
"""

from __future__ import annotations

import functools
import importlib
import threading
from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from typing import Any

from .base import Backend, StatusListener

__all__ = [
    "Backend",
    "backend_for",
    "act_on_section",
    "backend_status",
    "check_backend_options",
    "get_backend",
    "loaded_backends",
    "optional",
    "observe_backends",
    "register_backend",
    "registered_backends",
]

ENTRY_POINT_GROUP = "notebook_launcher.backends"
LOCAL = "local"

_lock = threading.Lock()
_known: dict[str, str | Callable[[], Backend]] = {
    LOCAL: "notebook_launcher.backends.local.backend:LocalBackend",
    "ray": "notebook_launcher.backends.ray.backend:RayBackend",
}
_BUILT_IN = tuple(_known)  # shown in the sidebar from the start; others once a launch loads them
_loaded: dict[str, Backend] = {}
_watchers: dict[int, tuple[StatusListener, list[Callable[[], None]]]] = {}  # observe_backends': listener, stops
_entry_points_read = False


def register_backend(name: str, backend: str | Callable[[], Backend]) -> None:
    """Make ``cluster=name`` (or ``"name://..."``) launch on ``backend``: a ``"module:Class"`` path
    (imported when first used) or a callable returning the ``Backend``.

    Examples:
        >>> register_backend("ray", "notebook_launcher.backends.ray.backend:RayBackend")  # as built in
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"a backend's name is an identifier such as 'ray', got {name!r}")
    with _lock:
        _known[name] = backend
        _loaded.pop(name, None)


def registered_backends() -> list[str]:
    """The names ``cluster=`` accepts, built-in ones first (installed packages' entry points included)."""
    _read_entry_points()
    return list(_known)


def get_backend(name: str) -> Backend:
    """The backend registered as ``name``, imported (once) if it was not yet.

    Examples:
        >>> get_backend("local").option_names
        ()
    """
    with _lock:
        if name in _loaded:
            return _loaded[name]
    _read_entry_points()
    if name not in _known:
        raise ValueError(f"no backend named {name!r}; registered: {', '.join(map(repr, _known))}")
    made = _make(_known[name])
    with _lock:
        backend = _loaded.setdefault(name, made)
        new = backend is made
        watchers = list(_watchers.values()) if new else []
    for listener, stops in watchers:  # a sidebar open before it was loaded shows it too
        stops.append(optional(backend, "observe")(listener))
        for section, value in optional(backend, "status")().items():
            listener(section, value)
    return backend


def backend_for(cluster: Any) -> Backend:
    """The backend ``launch``'s ``cluster`` argument names: None is the local one."""
    if cluster is None:
        return get_backend(LOCAL)
    name = cluster.partition("://")[0] if isinstance(cluster, str) else None
    if name and name != LOCAL and name in registered_backends():
        return get_backend(name)
    named = ", ".join(f"{known!r}" + (" (cluster=None)" if known == LOCAL else "") for known in registered_backends())
    raise ValueError(
        f"cluster={cluster!r} names no backend; registered: {named}; e.g. cluster='ray' or 'ray://host:10001'"
    )


def check_backend_options(backend: Backend, cluster: Any, options: Mapping[str, Any]) -> Any:
    """``backend``'s checked options from ``launch``'s extra keywords; a keyword another backend
    takes is refused with the ``cluster=`` that takes it."""
    elsewhere = {
        name: other
        for name in options
        if name not in backend.option_names
        for other in registered_backends()
        if other != backend.name and name in _option_names(other)
    }
    if elsewhere:
        given = " and ".join(elsewhere)
        owners = sorted(set(elsewhere.values()))
        verb = "apply" if len(elsewhere) > 1 else "applies"
        raise ValueError(f"{given} only {verb} with cluster={owners[0]!r}; pass cluster={owners[0]!r} too")
    return backend.check_options(cluster, options)


def loaded_backends() -> list[Backend]:
    """The backends imported so far, built-in ones always (their status is what the sidebar shows)."""
    for name in _BUILT_IN:
        get_backend(name)
    with _lock:
        return list(_loaded.values())


def backend_status() -> dict[str, Any]:
    """Every loaded backend's sidebar sections (``backends.status``), by name, in the order the
    backends were loaded (``Backend.status``)."""
    merged: dict[str, Any] = {}
    for backend in loaded_backends():
        merged.update(optional(backend, "status")())
    return merged


def optional(backend: Backend, name: str) -> Callable[..., Any]:
    """``backend``'s member ``name``, or the seam's default for it when the backend (which need
    not subclass ``base.Backend``) leaves it out.

    Examples:
        >>> class Bare:
        ...     name = "bare"
        >>> optional(Bare(), "status")()
        {}
    """
    member = getattr(backend, name, None)
    return member if member is not None else functools.partial(getattr(Backend, name), backend)


def act_on_section(section: str, action: str) -> None:
    """Do ``action`` of sidebar section ``section`` (a click on its button): the loaded backend
    whose section it is does it. Raises ``ValueError`` saying why it cannot be done.

    Examples:
        >>> act_on_section("no such section", "go")
        Traceback (most recent call last):
        ValueError: no backend shows a section 'no such section'
    """
    for backend in loaded_backends():
        try:
            optional(backend, "act")(section, action)
        except LookupError:
            continue
        return
    raise ValueError(f"no backend shows a section {section!r}")


def observe_backends(listener: StatusListener) -> Callable[[], None]:
    """Subscribe ``listener`` to every loaded backend's status, and to the sections of a backend
    loaded later (told at once when it loads); returns the function that stops it."""
    stops: list[Callable[[], None]] = []
    loaded_backends()
    with _lock:
        _watchers[id(stops)] = (listener, stops)
        backends = list(_loaded.values())
    stops.extend(optional(backend, "observe")(listener) for backend in backends)

    def stop() -> None:
        with _lock:
            _watchers.pop(id(stops), None)
        for each in stops:
            each()

    return stop


def _option_names(name: str) -> tuple[str, ...]:
    try:
        return tuple(get_backend(name).option_names)
    except Exception:  # a broken third-party backend must not break every other launch
        return ()


def _make(spec: str | Callable[[], Backend]) -> Backend:
    if not isinstance(spec, str):
        return spec()
    module, _, attribute = spec.partition(":")
    made: Backend = getattr(importlib.import_module(module), attribute)()
    return made


def _read_entry_points() -> None:
    global _entry_points_read
    if _entry_points_read:
        return
    _entry_points_read = True
    for point in entry_points(group=ENTRY_POINT_GROUP):
        with _lock:
            _known.setdefault(point.name, point.value)
