"""Trackers backed by an experiment-tracking package: the ones Accelerate offers, by the same names.

Each is used only when its package is installed, and is started the way Accelerate starts it
(``project`` is ``init_trackers``' project name, ``options`` its ``init_kwargs[name]``), so a run
lands where the same script under Accelerate puts it:

- ``"wandb"``: ``wandb.init(project=project, **options)`` (``WANDB_MODE=offline`` works as usual);
- ``"mlflow"``: experiment ``project`` (``MLFLOW_EXPERIMENT_NAME`` wins), tracking URI from mlflow's
  own settings (``MLFLOW_TRACKING_URI``), options ``logging_dir`` (artifacts), ``run_id``, ``tags``,
  ``nested_run``, ``run_name``, ``description``; only numbers are logged, as metrics;
- ``"comet_ml"``: ``comet_ml.start(project_name=project, **options)`` (``online=False`` for offline);
- ``"aim"``: ``aim.Run(repo=<logging_dir>, **options)`` named ``project``;
- ``"clearml"``: ``Task.init(project_name=project, task_name=project, **options)``;
- ``"dvclive"``: ``dvclive.Live(**options)``;
- ``"swanlab"``: ``swanlab.init(project=project, **options)``;
- ``"trackio"``: ``trackio.init(project=project, **options)``.

Examples:
    >>> sorted(SERVICE_TRACKERS)
    ['aim', 'clearml', 'comet_ml', 'dvclive', 'mlflow', 'swanlab', 'trackio', 'wandb']
    >>> SERVICE_TRACKERS["mlflow"].package
    'mlflow'
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import numbers
import os
from typing import Any

__all__ = ["SERVICE_TRACKERS", "ServiceTracker", "installed"]


def installed(package: str) -> bool:
    """Whether ``package`` can be imported here (without importing it).

    Examples:
        >>> installed("json"), installed("no_such_package_here")
        (True, False)
    """
    return importlib.util.find_spec(package) is not None


def _numbers(values: dict) -> dict:
    return {name: value for name, value in values.items() if isinstance(value, numbers.Number)}


class ServiceTracker:
    """One run of a tracking package: ``start`` it, ``store_init_configuration``, ``log``, ``finish``.

    ``tracker`` is the package's own run object (what ``get_tracker(name, unwrap=True)`` gives).
    """

    name = ""
    package = ""
    requires_logging_directory = False

    def __init__(self, project: str, logging_dir: str, **options: Any) -> None:
        self.project = project
        self.logging_dir = logging_dir
        self.options = options
        self.run: Any = None

    @property
    def module(self) -> Any:
        return importlib.import_module(self.package)

    @property
    def tracker(self) -> Any:
        return self.run

    def start(self) -> None:
        """``<package>.init(project=project, **options)``: wandb's, swanlab's and trackio's way."""
        self.run = self.module.init(project=self.project, **self.options)

    def store_init_configuration(self, config: dict) -> None:
        self.run.config.update(config, allow_val_change=True)

    def log(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
        self.run.log(values, step=step, **kwargs)

    def finish(self) -> None:
        self.run.finish()


class WandBTracker(ServiceTracker):
    name = package = "wandb"


class MLflowTracker(ServiceTracker):
    name = package = "mlflow"

    def start(self) -> None:
        mlflow = self.module
        options = dict(self.options)
        tags = os.environ.get("MLFLOW_TAGS", options.get("tags"))
        tags = json.loads(tags) if isinstance(tags, str) else tags
        nested = os.environ.get("MLFLOW_NESTED_RUN", options.get("nested_run", False))
        nested = nested.lower() in ("1", "true", "yes") if isinstance(nested, str) else bool(nested)
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME", options.get("experiment_name", self.project))
        found = mlflow.search_experiments(filter_string=f"name = '{name}'")
        experiment = (
            found[0].experiment_id
            if found
            else mlflow.create_experiment(name=name, artifact_location=options.get("logging_dir"), tags=tags)
        )
        self.run = mlflow.start_run(
            run_id=os.environ.get("MLFLOW_RUN_ID", options.get("run_id")),
            experiment_id=experiment,
            run_name=options.get("run_name"),
            nested=nested,
            tags=tags,
            description=options.get("description"),
        )

    def store_init_configuration(self, config: dict) -> None:
        from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH, MAX_PARAMS_TAGS_PER_BATCH

        params = [(name, value) for name, value in config.items() if len(str(value)) <= MAX_PARAM_VAL_LENGTH]
        for start in range(0, len(params), MAX_PARAMS_TAGS_PER_BATCH):
            self.module.log_params(dict(params[start : start + MAX_PARAMS_TAGS_PER_BATCH]))

    def log(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
        self.module.log_metrics(_numbers(values), step=step, **kwargs)

    def finish(self) -> None:
        self.module.end_run()


class CometMLTracker(ServiceTracker):
    name = "comet_ml"
    package = "comet_ml"

    def start(self) -> None:
        self.run = self.module.start(project_name=self.project, **self.options)

    def store_init_configuration(self, config: dict) -> None:
        self.run.log_parameters(config)

    def log(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
        if step is not None:
            self.run.set_step(step)
        for name, value in values.items():
            if isinstance(value, numbers.Number):
                self.run.log_metric(name, value, step=step, **kwargs)
            elif isinstance(value, dict):
                self.run.log_metrics(value, step=step, **kwargs)
            else:
                self.run.log_other(name, value, **kwargs)

    def finish(self) -> None:
        self.run.end()


class AimTracker(ServiceTracker):
    name = package = "aim"
    requires_logging_directory = True

    def start(self) -> None:
        self.run = self.module.Run(repo=self.logging_dir, **self.options)
        self.run.name = self.project

    def store_init_configuration(self, config: dict) -> None:
        self.run["hparams"] = config

    def log(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
        for name, value in values.items():
            self.run.track(value, name=name, step=step, **kwargs)

    def finish(self) -> None:
        self.run.close()


class ClearMLTracker(ServiceTracker):
    name = package = "clearml"

    def start(self) -> None:
        from clearml import Task

        options = {"project_name": self.project, "task_name": self.project, **self.options}
        self.run = Task.current_task() or Task.init(**options)

    def store_init_configuration(self, config: dict) -> None:
        self.run.connect_configuration(config)

    def log(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
        logger = self.run.get_logger()
        for name, value in _numbers(values).items():
            if step is None:
                logger.report_single_value(name=name, value=value, **kwargs)
            else:
                title, _, series = name.rpartition("/")
                logger.report_scalar(title=title or name, series=series, value=value, iteration=step, **kwargs)

    def finish(self) -> None:
        self.run.close()


class DVCLiveTracker(ServiceTracker):
    name = package = "dvclive"

    def start(self) -> None:
        self.run = self.module.Live(**self.options)

    def store_init_configuration(self, config: dict) -> None:
        self.run.log_params(config)

    def log(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
        if step is not None:
            self.run.step = step
        for name, value in _numbers(values).items():
            self.run.log_metric(name, value, **kwargs)
        self.run.next_step()

    def finish(self) -> None:
        self.run.end()


class _ModuleLevelTracker(ServiceTracker):
    """A package whose configuration and end are module-level calls (``<package>.config``,
    ``<package>.finish()``)."""

    def store_init_configuration(self, config: dict) -> None:
        self.module.config.update(config)

    def finish(self) -> None:
        self.module.finish()


class SwanLabTracker(_ModuleLevelTracker):
    name = package = "swanlab"


class TrackioTracker(_ModuleLevelTracker):
    name = package = "trackio"

    def log(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
        self.module.log(values, step=step, **kwargs)


SERVICE_TRACKERS: dict[str, type[ServiceTracker]] = {
    tracker.name: tracker
    for tracker in (
        WandBTracker,
        MLflowTracker,
        CometMLTracker,
        AimTracker,
        ClearMLTracker,
        DVCLiveTracker,
        SwanLabTracker,
        TrackioTracker,
    )
}
