"""What a launch has produced so far: per-rank status, output, metrics, results and failures.

Pure state, filled by the supervisor thread and read by the ``Launch`` handle and the views; no
processes here, so it is tested alone.

Example:
    >>> record = LaunchRecord(2)
    >>> _ = record.add_output(0, "stdout", "hello\\n")
    >>> record.add_result(0, 42); record.add_result(1, 43)
    >>> record.finish(); record.status, record.results
    ('succeeded', [42, 43])
"""

from __future__ import annotations

import itertools
import re
import threading
import time
from dataclasses import dataclass, replace
from html.parser import HTMLParser

__all__ = ["LaunchRecord", "LogLine", "display_text", "html_text"]


def display_text(data):
    """How a rank's ``display()`` bundle reads in its log: one line of text.

    Its text/plain form, unless that is only an object's default repr and the bundle has HTML, whose
    text is used instead (Hugging Face Trainer's progress table reads as its numbers, not as
    ``<IPython.core.display.HTML object>``).

    Example:
        >>> display_text({"text/plain": "{'answer': 42}", "image/png": "..."})
        "{'answer': 42}\\n"
        >>> display_text({"text/plain": "<IPython.core.display.HTML object>",
        ...               "text/html": "<b>step</b> 10 <i>loss</i> 0.3"})
        'step 10 loss 0.3\\n'
    """
    plain = data.get("text/plain")
    if (plain is None or _DEFAULT_REPR.fullmatch(plain)) and "text/html" in data:
        plain = html_text(data["text/html"])
    return (plain if plain is not None else "<display>").rstrip("\n") + "\n"


_DEFAULT_REPR = re.compile(r"<[\w.]+ object( at 0x[0-9a-f]+)?>")


def html_text(markup):
    """The readable text of an HTML fragment: block ends and table rows become line breaks."""
    parser = _TextOf()
    parser.feed(markup)
    lines = [" ".join("".join(line).split()) for line in parser.lines]
    return "\n".join(line for line in lines if line)


class _TextOf(HTMLParser):
    _BREAKS = frozenset({"br", "p", "div", "tr", "li", "h1", "h2", "h3", "h4", "table", "thead", "tbody"})

    def __init__(self):
        super().__init__()
        self.lines: list[list[str]] = [[]]
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        if tag in ("style", "script"):
            self._skip += 1
        elif tag in self._BREAKS:
            self.lines.append([])
        elif tag in ("td", "th"):
            self.lines[-1].append(" ")

    def handle_endtag(self, tag):
        if tag in ("style", "script"):
            self._skip = max(0, self._skip - 1)
        elif tag in self._BREAKS:
            self.lines.append([])

    def handle_data(self, data):
        if not self._skip:
            self.lines[-1].append(data)


@dataclass(frozen=True)
class LogLine:
    """One entry of a rank's log.

    ``stream`` is "stdout" or "stderr"; ``time`` is when the kernel got it; ``seq`` orders entries
    of all ranks by arrival. A rank's ``display()`` is an entry too: ``bundle`` holds its mime
    bundle and ``text`` its text form; a display updated by its ``display_id`` replaces its entry.
    """

    rank: int
    stream: str
    text: str
    time: float
    seq: int = 0
    bundle: dict | None = None
    display_id: str | None = None


class LaunchRecord:
    """The state of one launch. Thread-safe: written by one thread, read by any."""

    def __init__(self, num_ranks, first_rank=0):
        self.first_rank = first_rank
        self.started_at = time.time()
        self.finished_at = None
        self._lock = threading.Lock()
        self._ranks = range(first_rank, first_rank + num_ranks)
        self._status = {rank: "starting" for rank in self._ranks}
        self._lines: dict[int, list[LogLine]] = {rank: [] for rank in self._ranks}
        self._display_index: dict[tuple[int, str], int] = {}  # (rank, display id) -> index in its log
        self._seq = itertools.count()
        self._results = {}
        self._failures = []
        self._metrics = []
        self._stopped = False
        self._finished = False

    @property
    def ranks(self):
        return list(self._ranks)

    def rank_status(self, rank):
        return self._status[rank]

    def set_rank_status(self, rank, status):
        with self._lock:
            self._status[rank] = status

    def add_output(self, rank, stream, text):
        """Append a line to ``rank``'s log; returns its index there."""
        with self._lock:
            lines = self._lines[rank]
            lines.append(LogLine(rank, stream, text, time.time(), next(self._seq)))
            return len(lines) - 1

    def add_display(self, rank, data, display_id=None, update=False):
        """A rank displayed the mime bundle ``data``; returns (index in its log, whether it replaced).

        With ``update`` (``DisplayHandle.update()``), the entry shown under ``display_id`` is replaced
        in place; an update for an id not shown yet is shown as new, as front ends do.
        """
        with self._lock:
            lines = self._lines[rank]
            index = self._display_index.get((rank, display_id)) if display_id is not None else None
            if update and index is not None:
                lines[index] = replace(lines[index], text=display_text(data), bundle=data, time=time.time())
                return index, True
            lines.append(LogLine(rank, "stdout", display_text(data), time.time(), next(self._seq), data, display_id))
            if display_id is not None:
                self._display_index[(rank, display_id)] = len(lines) - 1
            return len(lines) - 1, False

    def lines(self, rank, start=0):
        """``rank``'s log entries (from index ``start``), in the order they came."""
        with self._lock:
            return self._lines[rank][start:]

    def line_count(self, rank):
        with self._lock:
            return len(self._lines[rank])

    def interleaved(self, last=None):
        """Every rank's entries in arrival order; with ``last``, only each rank's last ``last``."""
        with self._lock:
            parts = [lines[-last:] if last else list(lines) for lines in self._lines.values()]
        return sorted((line for part in parts for line in part), key=lambda line: line.seq)

    def add_metric(self, rank, metric, when):
        with self._lock:
            self._metrics.append({"rank": rank, "time": when, **metric})

    @property
    def metrics(self):
        with self._lock:
            return list(self._metrics)

    def add_result(self, rank, value):
        with self._lock:
            self._results[rank] = value
            self._status[rank] = "done"

    def add_failure(self, rank, exception, when):
        """Record that ``rank`` failed at ``when``; the earliest failure is the launch's cause."""
        with self._lock:
            self._failures.append((when, rank, exception, exception.__traceback__))
            self._status[rank] = "failed"

    def mark_stopped(self):
        """The user stopped the launch (interrupt or ``stop()``)."""
        self._stopped = True

    def finish(self):
        """No more events will come: ranks still starting or running were stopped."""
        with self._lock:
            for rank, status in self._status.items():
                if status in ("starting", "running"):
                    self._status[rank] = "stopped"
            self.finished_at = time.time()
            self._finished = True

    @property
    def finished(self):
        return self._finished

    @property
    def status(self):
        """ "running" until finished; then "failed", "stopped" or "succeeded"."""
        if not self._finished:
            return "running" if any(s != "starting" for s in self._status.values()) else "starting"
        if self._failures:
            return "failed"
        if self._stopped or len(self._results) < len(self._status):
            return "stopped"
        return "succeeded"

    @property
    def failure(self):
        """The exception of the first rank that failed (earliest in time), or None."""
        with self._lock:
            return min(self._failures, key=lambda item: (item[0], item[1]))[2] if self._failures else None

    @property
    def failure_traceback(self):
        """The traceback the first failure came with (the rank's frames), or None."""
        with self._lock:
            return min(self._failures, key=lambda item: (item[0], item[1]))[3] if self._failures else None

    @property
    def failed_rank(self):
        with self._lock:
            return min(self._failures, key=lambda item: (item[0], item[1]))[1] if self._failures else None

    @property
    def results(self):
        """Every rank's return value in rank order (None for a rank that returned nothing)."""
        with self._lock:
            return [self._results.get(rank) for rank in self._ranks]

    @property
    def elapsed(self):
        return (self.finished_at or time.time()) - self.started_at
