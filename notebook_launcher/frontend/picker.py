"""An in-cell device picker for front ends without the JupyterLab sidebar (Colab, Kaggle, VS Code).

Example:
    >>> from notebook_launcher import device_picker
    >>> device_picker()   # doctest: +SKIP

(Skipped as a doctest: the dropdowns need a notebook front end.)
"""

from __future__ import annotations

from ..devices.inventory import device_inventory
from .settings import SETTING_CHOICES, kernel_settings, set_defaults

__all__ = ["device_picker"]


def device_picker():
    """A row of dropdowns bound to the kernel's launch defaults; returns the widget (also displayed)."""
    import ipywidgets as w
    from IPython.display import display

    inventory = device_inventory()
    settings = kernel_settings()
    counts = [(f"default ({inventory['default_processes']})", None)] + [
        (str(n), n) for n in range(1, inventory["max_processes"] + 1)
    ]
    fields = {
        "num_processes": w.Dropdown(options=counts, value=settings.num_processes, description="Processes"),
        "start_method": w.Dropdown(
            options=list(SETTING_CHOICES["start_method"]), value=settings.start_method, description="Start method"
        ),
        "mixed_precision": w.Dropdown(
            options=list(SETTING_CHOICES["mixed_precision"]), value=settings.mixed_precision, description="Precision"
        ),
    }
    for name, dropdown in fields.items():
        dropdown.observe(lambda change, name=name: set_defaults(**{name: change["new"]}), names="value")
    devices = ", ".join(
        [f"GPU {g['index']}: {g['name']}" for g in inventory["cuda"]] + [f"{inventory['cpu']['count']} CPUs"]
    )
    box = w.VBox(
        [
            w.HTML(f"<b>notebook_launcher</b> · launches use {inventory['device'].upper()} · {devices}"),
            w.HBox(list(fields.values())),
        ]
    )
    display(box)
    return box
