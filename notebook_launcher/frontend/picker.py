"""An in-cell device picker for front ends without the JupyterLab sidebar (Colab, Kaggle, VS Code).

Examples:
    >>> from notebook_launcher import device_picker
    >>> device_picker()   # doctest: +SKIP

(Skipped as a doctest: the dropdowns need a notebook front end.)
"""

from __future__ import annotations

from typing import Any

from ..devices.inventory import device_inventory
from .settings import SETTING_CHOICES, kernel_settings, set_defaults

__all__ = ["device_picker", "DevicePicker"]

_DEFAULT = "default"  # the dropdown's value for num_processes=None (None itself reads as "no selection")


class DevicePicker:
    """The picker shown in the cell. ``widget`` is its ipywidgets box; it is shown once, by
    ``device_picker()`` itself, so ending a cell with the call does not show it a second time."""

    def __init__(self, widget: Any, fields: dict) -> None:
        self.widget = widget
        self.fields = fields

    def _ipython_display_(self) -> None:
        """Already displayed: show nothing more."""

    def __repr__(self) -> str:
        return f"<device picker: {kernel_settings().as_dict()}>"


def device_picker() -> DevicePicker:
    """Show dropdowns bound to the kernel's launch defaults (what the JupyterLab sidebar sets).

    Returns a ``DevicePicker`` (its ``fields`` are the dropdowns: "num_processes", "start_method",
    "mixed_precision"). Changing a dropdown calls ``set_defaults``; a change made elsewhere (the
    sidebar, ``set_defaults``, another picker) moves the dropdowns, so they always show what
    launches will use.
    """
    import ipywidgets as w
    from IPython.display import display

    inventory = device_inventory()
    settings = kernel_settings()
    counts = [(f"default ({inventory['default_processes']})", _DEFAULT)] + [
        (str(n), str(n)) for n in range(1, inventory["max_processes"] + 1)
    ]
    current = _DEFAULT if settings.num_processes is None else str(settings.num_processes)
    fields = {
        "num_processes": w.Dropdown(options=counts, value=current, description="Processes"),
        "start_method": w.Dropdown(
            options=list(SETTING_CHOICES["start_method"]), value=settings.start_method, description="Start method"
        ),
        "mixed_precision": w.Dropdown(
            options=list(SETTING_CHOICES["mixed_precision"]), value=settings.mixed_precision, description="Precision"
        ),
    }
    fields["num_processes"].observe(
        lambda change: set_defaults(num_processes=None if change["new"] == _DEFAULT else int(change["new"])),
        names="value",
    )
    for name in ("start_method", "mixed_precision"):
        fields[name].observe(lambda change, name=name: set_defaults(**{name: change["new"]}), names="value")
    devices = ", ".join(
        [f"GPU {g['index']}: {g['name']}" for g in inventory["cuda"]] + [f"{inventory['cpu']['count']} CPUs"]
    )
    box = w.VBox(
        [
            w.HTML(f"<b>notebook_launcher</b> · launches use {inventory['device'].upper()} · {devices}"),
            w.HBox(list(fields.values())),
        ]
    )
    _follow(settings, fields, box)
    display(box)
    return DevicePicker(box, fields)


def _follow(settings: Any, fields: dict, box: Any) -> None:
    """Keep ``fields`` at ``settings``' values until ``box`` is closed."""

    def follow(values: dict) -> None:
        if getattr(box, "comm", None) is None:  # closed: the picker is gone
            stop()
            return
        for name, field in fields.items():
            value = values[name]
            field.value = _DEFAULT if value is None else str(value) if name == "num_processes" else value

    stop = settings.observe(follow)
