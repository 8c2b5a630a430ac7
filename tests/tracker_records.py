"""Read back what each tracker package wrote for a run, from its own files (for tests/trainer/test_trackers.py).

Every reader takes the run's folder (the test's ``HOME``, working directory and ``project_dir``)
and returns ``(config, [(step, loss), ...])`` with ``config`` the stored ``lr`` (None where the
package keeps no configuration we can read).
"""

from __future__ import annotations

import glob
import json
import sqlite3
import zipfile
from pathlib import Path

__all__ = ["READERS"]

# offline settings and options for each tracker's run, as a user would pass them
ENVIRONMENT = {
    "WANDB_MODE": "offline",
    "WANDB_SILENT": "true",
    "MLFLOW_ALLOW_FILE_STORE": "true",
    "CLEARML_OFFLINE_MODE": "1",
}


def environment(folder: Path) -> dict[str, str]:
    """The variables that keep every tracker offline and inside ``folder``."""
    return {
        **ENVIRONMENT,
        "HOME": str(folder),
        "WANDB_DIR": str(folder),
        "MLFLOW_TRACKING_URI": (folder / "mlruns").as_uri(),
        "COMET_OFFLINE_DIRECTORY": str(folder / "comet"),
    }


def init_kwargs(folder: Path) -> dict[str, dict]:
    return {
        "comet_ml": {"online": False},
        "swanlab": {"mode": "offline", "logdir": str(folder / "swanlab")},
        "dvclive": {"dir": str(folder / "dvclive"), "save_dvc_exp": False},
    }


def _only(pattern: str) -> str:
    found = glob.glob(pattern)
    assert len(found) == 1, (pattern, found)
    return found[0]


def _wandb_records(path: str) -> list[bytes]:
    """The protobuf records of a ``.wandb`` file: a 7-byte header, then LevelDB-log framing
    (32 KiB blocks; each piece has a 7-byte header: checksum, length, type full/first/middle/last)."""
    data = Path(path).read_bytes()
    block, position, records, pending = 32768, 7, [], b""
    while position + 7 <= len(data):
        room = block - position % block
        if room < 7:
            position += room
            continue
        length = int.from_bytes(data[position + 4 : position + 6], "little")
        kind = data[position + 6]
        pending += data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind in (1, 4):  # full or last piece
            records.append(pending)
            pending = b""
    return records


def wandb(folder: Path):
    from wandb.proto import wandb_internal_pb2

    config, points = None, []
    for raw in _wandb_records(_only(f"{folder}/wandb/offline-run-*/*.wandb")):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        kind = record.WhichOneof("record_type")
        if kind == "config":
            config = config or {item.key: json.loads(item.value_json) for item in record.config.update}.get("lr")
        elif kind == "history":
            items = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            points.append((items["_step"], items["loss"]))
    return config, points


def mlflow(folder: Path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=(folder / "mlruns").as_uri())
    (run,) = client.search_runs([client.get_experiment_by_name("proj").experiment_id])
    history = client.get_metric_history(run.info.run_id, "loss")
    return float(run.data.params["lr"]), [(metric.step, metric.value) for metric in history]


def tensorboard(folder: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder / "proj"))
    events.Reload()
    return None, [(scalar.step, scalar.value) for scalar in events.Scalars("loss")]


def comet_ml(folder: Path):
    archive = zipfile.ZipFile(_only(f"{folder}/comet/*.zip"))
    messages = [json.loads(line) for line in archive.read("messages.json").decode().splitlines()]
    params = [m["payload"]["param"] for m in messages if m["type"] == "parameter_msg"]
    config = [param["paramValue"] for param in params if param["paramName"] == "lr"]
    metrics = [m["payload"]["metric"] for m in messages if m["type"] == "metric_msg"]
    return config[0], [(m["step"], m["metricValue"]) for m in metrics if m["metricName"] == "loss"]


def clearml(folder: Path):
    session = _only(f"{folder}/.clearml/cache/offline/offline-*/")
    lines = Path(session, "metrics.jsonl").read_text().splitlines()
    events = [event for line in lines for event in json.loads(line)]
    configuration = json.loads(Path(session, "task.json").read_text())["configuration"]
    config = float(configuration["General"]["value"].split("lr = ")[1].split()[0])
    return config, [(event["iter"], event["value"]) for event in events if event["metric"] == "loss"]


def dvclive(folder: Path):
    rows = (folder / "dvclive" / "plots" / "metrics" / "loss.tsv").read_text().splitlines()[1:]
    params = (folder / "dvclive" / "params.yaml").read_text()
    config = float(params.split("lr:")[1].split()[0])
    return config, [(int(step), float(value)) for step, value in (row.split("\t") for row in rows)]


def trackio(folder: Path):
    database = sqlite3.connect(_only(f"{folder}/.cache/huggingface/trackio/proj.db"))
    rows = database.execute("select step, metrics from metrics order by step").fetchall()
    (config,) = database.execute("select config from configs").fetchone()
    return json.loads(config)["lr"], [(step, json.loads(values)["loss"]) for step, values in rows]


def swanlab(folder: Path):
    config = Path(_only(f"{folder}/swanlab/run-*/files/config.yaml")).read_text()
    run = Path(_only(f"{folder}/swanlab/run-*/run-*.swanlab")).read_bytes()
    # its records are a binary format with no public reader: the metric's name must be in it
    assert b"loss" in run
    return float(config.split("lr:")[1].split("value:")[1].split()[0]), None


READERS = {
    "wandb": wandb,
    "mlflow": mlflow,
    "tensorboard": tensorboard,
    "comet_ml": comet_ml,
    "clearml": clearml,
    "dvclive": dvclive,
    "trackio": trackio,
    "swanlab": swanlab,
}
