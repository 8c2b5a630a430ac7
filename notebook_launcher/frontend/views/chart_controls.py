"""The live charts' controls: how much to smooth (a slider; 0 draws the raw values alone) and what
the x axis counts (steps, or seconds since the first metric). A change redraws the charts at the
widget's next redraw, on the launch's own thread; the finished form keeps the defaults.

Example (in a kernel)::

    controls = ChartControls(ipywidgets, changed=lambda: print("redraw"))
    controls.smoothing, controls.x            # (0.6, "step")
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .charts import default_smoothing

__all__ = ["ChartControls"]


class ChartControls:
    """``box`` (the controls' row), ``smoothing`` and ``x`` (as the person chose them)."""

    def __init__(self, widgets: Any, changed: Callable[[], None]) -> None:
        self.slider = widgets.FloatSlider(
            value=default_smoothing(),
            min=0.0,
            max=0.99,
            step=0.01,
            description="smoothing",
            readout_format=".2f",
            continuous_update=False,
            tooltip="The weight of the smoothed line (an exponential moving average); 0 draws the raw values alone.",
        )
        self.axis = widgets.ToggleButtons(
            options=[("step", "step"), ("time", "time")],
            value="step",
            description="x axis",
            tooltips=["Each metric over the step it was logged at", "Each metric over the seconds since the first"],
        )
        self.axis.style.button_width = "56px"
        self.slider.observe(lambda _change: changed(), names="value")
        self.axis.observe(lambda _change: changed(), names="value")
        self.box = widgets.HBox([self.slider, self.axis])
        self.box.add_class("nl-chart-controls")

    @property
    def smoothing(self) -> float:
        return float(self.slider.value)

    @property
    def x(self) -> str:
        return str(self.axis.value)

    def close(self) -> None:
        for widget in (self.slider, self.axis, self.box):
            widget.close()
