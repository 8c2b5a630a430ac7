"""What a detached launch's ranks said, one JSON line per event, written by its host process and
read by every kernel that follows it.

The host's ``JournalListener`` is a launch listener like any other: each status, output and
display becomes one line of ``journal.jsonl`` (written whole with one ``write``, so a reader never
sees half a line), as does each metric of the launch's record (the function's own and the host's
samples of its ranks' CPU and memory) once a second, and the kernel's ``JournalReader`` applies
the lines it has not read yet to a ``LaunchRecord``. A kernel attached an hour later reads the
journal from the start: every line and metric so far.

Examples:
    >>> import os, tempfile
    >>> from notebook_launcher.launching.record import LaunchRecord
    >>> from notebook_launcher.wire.events import Output, Status
    >>> path = os.path.join(tempfile.mkdtemp(), "journal.jsonl")
    >>> journal = JournalListener(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
    >>> journal.on_status(Status(0, 1.0, "running")); journal.on_output(Output(0, 1.5, "stdout", "epoch 0\\n"))
    >>> record = LaunchRecord(1)
    >>> [event["e"] for event in JournalReader(path).apply(record)]
    ['status', 'output']
    >>> record.rank_status(0), record.text(0)
    ('running', 'epoch 0\\n')
"""

from __future__ import annotations

import json
import os
from typing import Any

from ..launching.listener import LiveLine, QuietListener, Shown
from ..launching.record import LaunchRecord
from ..wire.events import Metric, Output, Status

__all__ = ["JournalListener", "JournalReader"]


class JournalListener(QuietListener):
    """Writes a launch's events to the journal's descriptor ``fd`` (opened for appending)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._launch: Any = None
        self._metrics = 0  # how many of the record's metrics are written

    def _write(self, event: dict) -> None:
        os.write(self._fd, (json.dumps(event, default=repr) + "\n").encode())

    def on_start(self, launch: Any) -> None:
        self._launch = launch

    def on_status(self, event: Status) -> None:
        self._write({"e": "status", "rank": event.rank, "time": event.time, "status": event.status})

    def on_output(self, event: Output) -> None:
        self._write({"e": "output", "rank": event.rank, "time": event.time, "stream": event.stream, "text": event.text})

    def on_metric(self, event: Metric) -> None:
        pass  # the record's metrics are written at the flush, with the samples taken beside them

    def flush(self) -> float:
        if self._launch is not None:
            record = self._launch.record
            for metric in record.metrics_between(self._metrics):
                self._write({"e": "metric", "metric": metric})
                self._metrics += 1
        return 1.0

    def on_display(self, event: Shown) -> None:
        line = self._launch.line(event.rank, event.index)
        self._write(
            {"e": "display", "rank": event.rank, "data": line.bundle, "id": line.display_id, "update": event.replaced}
        )

    def on_live(self, event: LiveLine) -> None:
        pass  # a progress bar's frames: its finished line arrives as output

    def close(self) -> None:
        os.close(self._fd)


class JournalReader:
    """Reads the journal at ``path`` from where it stopped last time."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._offset = 0
        self._rest = b""

    def read(self) -> list[dict]:
        """The whole lines written since the last read."""
        try:
            with open(self._path, "rb") as file:
                file.seek(self._offset)
                data = file.read()
        except FileNotFoundError:
            return []
        self._offset += len(data)
        *lines, self._rest = (self._rest + data).split(b"\n")
        return [json.loads(line) for line in lines if line]

    def apply(self, record: LaunchRecord) -> list[dict]:
        """Apply the new lines to ``record``; the events they held, in order."""
        events = self.read()
        for event in events:
            _APPLY[event["e"]](record, event)
        return events


def _status(record: LaunchRecord, event: dict) -> None:
    record.set_rank_status(event["rank"], event["status"])


def _output(record: LaunchRecord, event: dict) -> None:
    record.add_output(event["rank"], event["stream"], event["text"])


def _metric(record: LaunchRecord, event: dict) -> None:
    metric = dict(event["metric"])
    rank, when = metric.pop("rank"), metric.pop("time")
    metric.pop("attempt", None)
    record.add_metric(rank, metric, when)


def _display(record: LaunchRecord, event: dict) -> None:
    index, _ = record.add_display(event["rank"], event["data"] or {}, event["id"], event["update"])
    event["index"] = index


_APPLY = {"status": _status, "output": _output, "metric": _metric, "display": _display}
