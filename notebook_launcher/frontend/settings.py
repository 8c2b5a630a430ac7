"""The kernel's launch defaults, which the JupyterLab sidebar (or code) may change.

``launch(num_processes=None, start_method=None, mixed_precision=None)`` takes these. Changes are
checked as a whole and applied all-or-nothing, so a bad message changes nothing.

Examples:
    >>> settings = LauncherSettings()
    >>> settings.update({"start_method": "spawn"}, max_processes=2)
    >>> settings.as_dict()
    {'num_processes': None, 'start_method': 'spawn', 'mixed_precision': 'no'}
    >>> settings.update({"num_processes": 9}, max_processes=2)
    Traceback (most recent call last):
    ...
    ValueError: num_processes must be an int from 1 to 2 (the devices found), or None; got 9
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..choices import MIXED_PRECISIONS, START_METHODS, check_choice

__all__ = ["LauncherSettings", "kernel_settings", "set_defaults", "SETTING_CHOICES"]

SETTING_CHOICES = {"start_method": START_METHODS, "mixed_precision": MIXED_PRECISIONS}


@dataclass
class LauncherSettings:
    num_processes: int | None = None
    start_method: str = "auto"
    mixed_precision: str = "no"

    def __post_init__(self):
        self._observers = []

    def as_dict(self):
        return asdict(self)

    def observe(self, callback):
        """Call ``callback(settings_dict)`` after every change; returns a function that stops the calls."""
        self._observers.append(callback)
        return lambda: self._observers.remove(callback) if callback in self._observers else None

    def update(self, changes, max_processes):
        """Apply ``changes`` (a dict of some of the fields) after checking all of them."""
        if not isinstance(changes, dict):
            raise ValueError(f"settings must be an object, got {type(changes).__name__}")
        unknown = sorted(set(changes) - set(self.as_dict()))
        if unknown:
            raise ValueError(f"unknown settings {unknown}; known: {sorted(self.as_dict())}")
        for name, value in changes.items():
            _check(name, value, max_processes)
        for name, value in changes.items():
            setattr(self, name, value)
        for callback in list(self._observers):
            try:
                callback(self.as_dict())
            except Exception:  # an observer (a sidebar whose comm closed) must not block a change
                pass


def _check(name, value, max_processes):
    if name == "num_processes":
        valid = value is None or (
            isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= max_processes
        )
        if not valid:
            raise ValueError(
                f"num_processes must be an int from 1 to {max_processes} (the devices found), or None; got {value!r}"
            )
    else:
        check_choice(name, value, SETTING_CHOICES[name])


_kernel_settings = LauncherSettings()


def kernel_settings():
    """This kernel's settings (one per kernel process: the sidebar talks to the kernel, not to a launch)."""
    return _kernel_settings


def set_defaults(**changes):
    """Set this kernel's launch defaults from code — what the JupyterLab sidebar sets.

    For Colab, Kaggle and VS Code, which have no sidebar (``device_picker()`` is the same as a widget).

    Examples:
        >>> set_defaults(num_processes=2, mixed_precision="bf16")   # doctest: +SKIP
        {'num_processes': 2, 'start_method': 'auto', 'mixed_precision': 'bf16'}

    Raises:
        ValueError: an unknown name or a value outside the choices / the devices found.
    """
    from ..devices import select_device

    kernel_settings().update(changes, select_device("auto").count())
    return kernel_settings().as_dict()
