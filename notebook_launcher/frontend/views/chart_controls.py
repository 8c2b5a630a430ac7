"""The live charts' controls: how much to smooth (presets from "off", the raw values alone, to 0.99),
what the x axis counts (steps, or seconds since the first metric) and whether outliers are left out
of the scale. A change redraws the charts at the
widget's next redraw, on the launch's own thread; the finished form keeps the defaults.

Presets in a labelled drop-down rather than a slider: ipywidgets' slider handle has no accessible
name (axe-core's ``aria-input-field-name``), while a ``<select>`` carries its label, and a person
picks from the weights TensorBoard and W&B users know by number.

Example (in a kernel)::

    controls = ChartControls(ipywidgets, changed=lambda: print("redraw"))
    controls.smoothing, controls.x, controls.clip     # (0.6, "step", False)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..subshells import handle_where_sent
from .chart_axes import clipping
from .charts import default_smoothing

__all__ = ["ChartControls", "smoothing_options", "PRESETS"]

PRESETS = (0.0, 0.3, 0.6, 0.8, 0.9, 0.95, 0.99)


def smoothing_options(default: float) -> list[tuple[str, float]]:
    """The drop-down's choices: the presets, with ``default`` among them (a weight set by the
    environment variable that is no preset joins them in order).

    Examples:
        >>> smoothing_options(0.6)[:3]
        [('off', 0.0), ('0.3', 0.3), ('0.6', 0.6)]
        >>> [label for label, _ in smoothing_options(0.75)][3:5]
        ['0.75', '0.8']
    """
    weights = sorted({*PRESETS, default})
    return [("off" if weight == 0 else f"{weight:g}", weight) for weight in weights]


class ChartControls:
    """``box`` (the controls' row), ``smoothing`` and ``x`` (as the person chose them)."""

    def __init__(self, widgets: Any, changed: Callable[[], None]) -> None:
        self.smoothing_choice = widgets.Dropdown(
            options=smoothing_options(default_smoothing()),
            value=default_smoothing(),
            description="smoothing",
            tooltip="The weight of the smoothed line (an exponential moving average); off draws the raw values alone.",
        )
        self.smoothing_choice.layout.width = "170px"
        self.axis = widgets.ToggleButtons(
            options=[("step", "step"), ("time", "time")],
            value="step",
            description="x axis",
            tooltips=["Each metric over the step it was logged at", "Each metric over the seconds since the first"],
        )
        self.axis.style.button_width = "56px"
        self.axis.style.description_width = "initial"  # its label beside its buttons, not above them
        self.axis.layout.width = "auto"
        self.clip_box = widgets.Checkbox(
            value=clipping(),
            description="clip outliers",
            indent=False,
            tooltip="Leave the values below the 2nd and above the 98th percentile out of each chart's scale",
        )
        self.clip_box.layout.width = "auto"
        for control in (self.smoothing_choice, self.axis, self.clip_box):
            control.observe(lambda _change: changed(), names="value")
            handle_where_sent(control)  # a change is taken at once, even while a cell waits on the launch
        self.box = widgets.HBox([self.smoothing_choice, self.axis, self.clip_box])
        self.box.add_class("nl-chart-controls")

    @property
    def smoothing(self) -> float:
        return float(self.smoothing_choice.value)

    @property
    def x(self) -> str:
        return str(self.axis.value)

    @property
    def clip(self) -> bool:
        return bool(self.clip_box.value)

    def close(self) -> None:
        for widget in (self.smoothing_choice, self.axis, self.clip_box, self.box):
            widget.close()
