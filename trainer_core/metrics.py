"""``accelerator.log``: keep the metrics, and stream them to the kernel when launched from a notebook.

Each record is also logged on the ``trainer_core.metrics`` logger (its ``metric`` attribute);
under notebook_launcher a rank relays those to the kernel as "metric" events, which the launch
keeps (``Launch.metrics``) and its view draws. Outside a launch nothing listens and it is only kept.

Examples:
    >>> log = MetricLog()
    >>> log.log({"loss": 0.5})
    {'step': 0, 'values': {'loss': 0.5}}
    >>> _ = log.log({"loss": 0.25})
    >>> [(r["step"], r["values"]["loss"]) for r in log.records]
    [(0, 0.5), (1, 0.25)]
"""

from __future__ import annotations

import logging
import numbers

__all__ = ["MetricLog"]

_LOG = logging.getLogger("trainer_core.metrics")
_LOG.propagate = False  # the records are data for whoever relays them, not lines for the user's log


class MetricLog:
    def __init__(self):
        self.records = []
        self._next_step = 0

    def log(self, values, step=None):
        if not isinstance(values, dict):
            raise TypeError(f"log() takes a dict of metric name to number, got {type(values).__name__}")
        if step is None:
            step = self._next_step
        self._next_step = step + 1
        record = {"step": int(step), "values": {str(k): _number(v) for k, v in values.items()}}
        self.records.append(record)
        _send(record)
        return record

    def show(self, values, step):
        """Send ``values`` to the notebook view only (not kept, not given to trackers): what the
        library measures about the run, beside the user's metrics."""
        _send({"step": int(step), "values": {str(k): _number(v) for k, v in values.items()}})


def _number(value):
    if hasattr(value, "item"):
        value = value.item()
    if not isinstance(value, numbers.Number):
        raise TypeError(f"metric values must be numbers, got {type(value).__name__}: {value!r}")
    return float(value)  # type: ignore[arg-type]


def _send(record):
    if _LOG.isEnabledFor(logging.INFO):
        _LOG.info("metric", extra={"metric": record})
