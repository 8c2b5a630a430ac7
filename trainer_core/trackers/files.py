"""The trackers that write files: JSON lines, CSV and TensorBoard (see the package docstring)."""

from __future__ import annotations

import csv
import json
import os
from typing import Any

__all__ = ["JSONTracker", "CSVTracker", "TensorBoardTracker", "NoTracker"]


class _FileTracker:
    """A tracker writing ``<logging_dir>/<project>/<file_name>``, with ``config.json`` beside it."""

    name = ""
    file_name = ""

    def __init__(self, project: str, logging_dir: str) -> None:
        self.directory = os.path.join(logging_dir, project)
        os.makedirs(self.directory, exist_ok=True)
        self.path = os.path.join(self.directory, self.file_name)

    @property
    def tracker(self) -> Any:
        return self.path

    def store_init_configuration(self, config: dict) -> None:
        with open(os.path.join(self.directory, "config.json"), "w") as file:
            json.dump(config, file, indent=2, default=str)

    def finish(self) -> None:
        pass


class JSONTracker(_FileTracker):
    """One JSON line per ``log`` call in ``<logging_dir>/<project>/metrics.jsonl``."""

    name = "json"
    file_name = "metrics.jsonl"

    def __init__(self, project: str, logging_dir: str) -> None:
        super().__init__(project, logging_dir)
        self.records: list[dict] = []

    def log(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
        record = {"step": step, "values": values}
        self.records.append(record)
        with open(self.path, "a") as file:
            file.write(json.dumps(record, default=float) + "\n")


class CSVTracker(_FileTracker):
    """One row per ``log`` call in ``<logging_dir>/<project>/metrics.csv`` (rewritten when a new name appears)."""

    name = "csv"
    file_name = "metrics.csv"

    def __init__(self, project: str, logging_dir: str) -> None:
        super().__init__(project, logging_dir)
        self.rows: list[dict] = []
        self.columns: list[str] = ["step"]

    def log(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
        self.rows.append({"step": step, **values})
        new = [name for name in values if name not in self.columns]
        self.columns += new
        if new or len(self.rows) == 1:
            self._rewrite()
        else:
            with open(self.path, "a", newline="") as file:
                csv.DictWriter(file, self.columns).writerow(self.rows[-1])

    def _rewrite(self) -> None:
        with open(self.path, "w", newline="") as file:
            writer = csv.DictWriter(file, self.columns)
            writer.writeheader()
            writer.writerows(self.rows)


class TensorBoardTracker:
    """Scalars through ``torch.utils.tensorboard.SummaryWriter`` in ``<logging_dir>/<project>``."""

    name = package = "tensorboard"

    def __init__(self, project: str, logging_dir: str, **kwargs: Any) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as err:
            raise ImportError("log_with='tensorboard' needs the tensorboard package: pip install tensorboard") from err
        self.writer = SummaryWriter(os.path.join(logging_dir, project), **kwargs)

    @property
    def tracker(self) -> Any:
        return self.writer

    def store_init_configuration(self, config: dict) -> None:
        self.writer.add_hparams({k: v for k, v in config.items() if isinstance(v, int | float | str | bool)}, {})

    def log(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
        for name, value in values.items():
            if isinstance(value, int | float):
                self.writer.add_scalar(name, value, global_step=step)
        self.writer.flush()

    def finish(self) -> None:
        self.writer.close()


class NoTracker:
    """What ``get_tracker`` gives where no such tracker runs: every call does nothing."""

    def __init__(self, name):
        self.name = name
        self.tracker = None

    def __getattr__(self, attribute):
        return lambda *args, **kwargs: None
