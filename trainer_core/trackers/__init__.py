"""Experiment trackers for ``Accelerator(log_with=...)``: where ``accelerator.log`` also writes.

Every ``log`` call always streams to the notebook's launch view (``trainer_core.metrics``); trackers
add durable records, written by the main process only, as in Accelerate:

- ``"json"``: ``<logging_dir>/<project>/metrics.jsonl``, one ``{"step": .., "values": {..}}`` per call,
  plus ``config.json`` from ``init_trackers(config=...)``;
- ``"csv"``: ``<logging_dir>/<project>/metrics.csv``, one row per call (columns grow as names appear);
- ``"tensorboard"``: ``torch.utils.tensorboard.SummaryWriter`` (needs the ``tensorboard`` package);
- ``"wandb"``, ``"mlflow"``, ``"comet_ml"``, ``"aim"``, ``"clearml"``, ``"dvclive"``, ``"swanlab"``,
  ``"trackio"``: that package's run, started as Accelerate starts it (``services.py``), when installed;
- ``"all"``: the file trackers and every installed package above;
- any object with ``name``, ``log(values, step)`` and optionally ``store_init_configuration(config)``
  and ``finish()``.

Examples:
    >>> import tempfile
    >>> tracker = JSONTracker("run", tempfile.mkdtemp())
    >>> tracker.log({"loss": 0.5}, step=0)
    >>> tracker.records
    [{'step': 0, 'values': {'loss': 0.5}}]
"""

from .choose import KNOWN_TRACKERS, make_trackers, tracker_names
from .files import CSVTracker, JSONTracker, NoTracker, TensorBoardTracker
from .services import SERVICE_TRACKERS, ServiceTracker

__all__ = [
    "CSVTracker",
    "JSONTracker",
    "KNOWN_TRACKERS",
    "NoTracker",
    "SERVICE_TRACKERS",
    "ServiceTracker",
    "TensorBoardTracker",
    "make_trackers",
    "tracker_names",
]
