"""``Accelerator(log_with=...)`` writes to the tracker packages Accelerate supports, offline here.

Each tracker runs for real (wandb offline, mlflow's file store, comet_ml offline, clearml's offline
mode, dvclive, trackio's local database, swanlab offline, TensorBoard event files) and the test reads
what the package wrote back from its own files (``tests/tracker_records.py``). wandb, mlflow and
TensorBoard are test extras; the other packages are checked where they are installed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
from paths import TESTS
from tracker_records import READERS, environment, init_kwargs

from trainer_core import Accelerator
from trainer_core.trackers import KNOWN_TRACKERS, tracker_names
from trainer_core.trackers.services import installed

LOSSES = [(0, 1.0), (1, 0.5), (2, 1.0 / 3)]

RUN = textwrap.dedent(
    """
    import json, sys
    from trainer_core import Accelerator
    name, folder, options = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    accelerator = Accelerator(cpu=True, log_with=name, project_dir=folder)
    accelerator.init_trackers("proj", config={"lr": 0.1, "name": "x"}, init_kwargs=options)
    for step in range(3):
        accelerator.log({"loss": 1.0 / (step + 1)}, step=step)
    run = accelerator.get_tracker(name, unwrap=True)
    if name == "aim":  # no reader outside a live run: read it back from the run
        from aim.storage.context import Context
        metric = run.get_metric("loss", Context({}))
        steps, columns = metric.data.items_list()  # columns: values, epochs, times
        print("AIM", json.dumps([run["hparams"]["lr"], list(zip(steps, columns[0]))]))
    accelerator.end_training()
    print("TRACKERS", json.dumps([tracker.name for tracker in accelerator.trackers]))
    """
)


def run_tracker(name: str, folder: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", RUN, name, str(folder), json.dumps(init_kwargs(folder))],
        env={**environment(folder), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(TESTS)},
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.parametrize("name", sorted(set(KNOWN_TRACKERS) - {"json", "csv"}))
def test_a_tracker_package_records_the_run_where_installed(name, tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # for reading the run back here
    if not installed(KNOWN_TRACKERS[name].package):
        pytest.skip(f"{name} is not installed here")
    out = run_tracker(name, tmp_path)
    assert f'TRACKERS ["{name}"]' in out
    if name == "aim":
        config, points = json.loads(out.split("AIM ", 1)[1].splitlines()[0])
    else:
        config, points = READERS[name](tmp_path)
    assert config == (None if name == "tensorboard" else pytest.approx(0.1))  # TensorBoard keeps no config
    if name != "swanlab":  # its metric records have no reader (tracker_records.swanlab)
        assert [(step, pytest.approx(loss)) for step, loss in points] == LOSSES


def logged_to_every_tracker(folder, options):
    accelerator = Accelerator(cpu=True, log_with=["json", "tensorboard", "wandb", "mlflow"], project_dir=folder)
    accelerator.init_trackers("proj", config={"lr": 0.1}, init_kwargs=options)
    for step in range(3):
        accelerator.log({"loss": 1.0 / (step + 1)}, step=step)
    started = [tracker.name for tracker in accelerator.trackers]
    run = type(accelerator.get_tracker("wandb", unwrap=True)).__name__
    accelerator.end_training()
    return started, run


def test_the_main_rank_writes_every_tracker_of_a_launch(tmp_path, monkeypatch):
    from notebook_launcher import launch

    for variable, value in environment(tmp_path).items():
        monkeypatch.setenv(variable, value)
    monkeypatch.chdir(tmp_path)
    job = launch(logged_to_every_tracker, (str(tmp_path), init_kwargs(tmp_path)), num_processes=2, display="none")
    job.wait(timeout=300)
    (started0, run0), (started1, run1) = job.results
    assert started0 == ["json", "tensorboard", "wandb", "mlflow"] and started1 == []
    assert run0 == "Run" and run1 == "NoTracker"  # the other rank gets a tracker that ignores every call
    for name in ("wandb", "mlflow", "tensorboard"):
        config, points = READERS[name](tmp_path)
        assert [(step, pytest.approx(loss)) for step, loss in points] == LOSSES, name
        assert config in (0.1, None)


def test_all_means_the_file_trackers_and_every_installed_package():
    names, objects = tracker_names("all")
    wanted = ["json", "csv"] + [
        name for name, tracker in KNOWN_TRACKERS.items() if name not in ("json", "csv") and installed(tracker.package)
    ]
    assert names == wanted and objects == []
    assert {"tensorboard", "wandb", "mlflow"} <= set(names)  # the test extras
    from accelerate.utils import LoggerType

    assert tracker_names([LoggerType.TENSORBOARD, "json", LoggerType.WANDB]) == (["tensorboard", "json", "wandb"], [])
    with pytest.raises(ValueError, match="'neptune' is not a tracker here"):
        Accelerator(cpu=True, log_with=["json", "neptune"])


def test_a_named_tracker_that_is_not_installed_warns_and_a_wrong_name_raises(tmp_path):
    missing = [name for name, tracker in KNOWN_TRACKERS.items() if not installed(getattr(tracker, "package", "json"))]
    if not missing:
        pytest.skip("every tracker package is installed here")
    accelerator = Accelerator(cpu=True, log_with=["json", missing[0]], project_dir=str(tmp_path))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        accelerator.init_trackers("proj")
    assert any(f"the {KNOWN_TRACKERS[missing[0]].package} package is not installed" in str(w.message) for w in caught)
    assert [tracker.name for tracker in accelerator.trackers] == ["json"]
    with pytest.raises(ValueError, match="'wandb' is not a tracker of this Accelerator"):
        accelerator.get_tracker("wandb")
    assert accelerator.get_tracker("json").name == "json"
    accelerator.end_training()
