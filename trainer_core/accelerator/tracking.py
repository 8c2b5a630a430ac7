"""What the Accelerator offers for logging metrics: the notebook view and the trackers.

``Accelerator`` inherits these methods.

Examples:
    >>> from trainer_core import Accelerator
    >>> accelerator = Accelerator(cpu=True)
    >>> accelerator.log({"loss": 0.5}, step=1)
    >>> accelerator.logged
    [{'step': 1, 'values': {'loss': 0.5}}]
"""

from __future__ import annotations

from typing import Any

from ..metrics import MetricLog
from ..project import ProjectConfiguration
from ..trackers import NoTracker, make_trackers
from .process_helpers import ProcessHelpers

__all__ = ["TrackerMethods"]


class TrackerMethods(ProcessHelpers):
    """``log`` to the notebook view and the ``log_with`` trackers; starting and ending those."""

    trackers: list
    project_configuration: ProjectConfiguration
    _log_with: Any
    _metrics: MetricLog

    def log(self, values: dict, step: int | None = None, log_kwargs: dict | None = None) -> None:
        """Record metrics; under notebook_launcher they stream to the cell's view (``Launch.metrics``),
        and the main process writes them to the trackers (``log_with``)."""
        record = self._metrics.log(values, step)
        for tracker in self.trackers:
            tracker.log(record["values"], step=record["step"], **(log_kwargs or {}).get(tracker.name, {}))

    def init_trackers(self, project_name: str, config: dict | None = None, init_kwargs: dict | None = None) -> None:
        """Start the ``log_with`` trackers (main process) under ``<logging_dir>/<project_name>``, storing
        ``config`` (the run's hyperparameters).

        Examples:
            >>> import tempfile
            >>> from trainer_core import Accelerator
            >>> accelerator = Accelerator(cpu=True, log_with="json", project_dir=tempfile.mkdtemp())
            >>> accelerator.init_trackers("run", config={"lr": 0.1})
            >>> accelerator.log({"loss": 0.5})
            >>> accelerator.get_tracker("json").records
            [{'step': 0, 'values': {'loss': 0.5}}]
        """
        if self._log_with is None or not self.is_main_process:
            return
        logging_dir = self.project_configuration.logging_dir or "."
        self.trackers = make_trackers(self._log_with, project_name, logging_dir, init_kwargs)
        for tracker in self.trackers:
            if config is not None and hasattr(tracker, "store_init_configuration"):
                tracker.store_init_configuration(config)

    def get_tracker(self, name: str, unwrap: bool = False) -> Any:
        """The tracker called ``name`` (its package's own run object with ``unwrap``). As in Accelerate,
        a name not started raises ``ValueError`` where trackers run, and every process without trackers
        (the others, or before ``init_trackers``) gets a tracker that ignores every call."""
        for tracker in self.trackers:
            if tracker.name == name:
                return tracker.tracker if unwrap else tracker
        if self.trackers:
            started = ", ".join(repr(tracker.name) for tracker in self.trackers)
            raise ValueError(f"{name!r} is not a tracker of this Accelerator (started: {started})")
        return NoTracker(name)

    @property
    def logged(self) -> list[dict]:
        """Every ``log`` call of this Accelerator, as dicts with ``step`` and ``values``."""
        return self._metrics.records

    def end_training(self) -> None:
        """Finish the trackers (last started first: several wrap the process's output streams, and
        must unwrap in the reverse order) and wait for every process."""
        for tracker in reversed(self.trackers):
            if hasattr(tracker, "finish"):
                tracker.finish()
        self.wait_for_everyone()
