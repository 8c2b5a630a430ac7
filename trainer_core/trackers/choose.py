"""Which trackers ``log_with`` starts: names, ``"all"``, and tracker objects, as Accelerate reads them.

A name whose package is not installed is skipped with a warning that says what to install (Accelerate
skips it without a word); an unknown name is refused with the list of known ones. ``"all"`` means
the file trackers (JSON, CSV) and every installed tracker package.
"""

from __future__ import annotations

import warnings
from typing import Any

from .files import CSVTracker, JSONTracker, TensorBoardTracker
from .services import SERVICE_TRACKERS, installed

__all__ = ["KNOWN_TRACKERS", "make_trackers", "tracker_names"]

KNOWN_TRACKERS: dict[str, Any] = {
    "json": JSONTracker,
    "csv": CSVTracker,
    "tensorboard": TensorBoardTracker,
    **SERVICE_TRACKERS,
}


def _available(name: str) -> bool:
    package = getattr(KNOWN_TRACKERS[name], "package", "")
    return not package or installed(package)


def tracker_names(log_with: Any) -> tuple[list[str], list[Any]]:
    """The tracker names ``log_with`` asks for (in order, once each, "all" expanded to the available
    ones) and the tracker objects it holds.

    Examples:
        >>> tracker_names(["csv", "json", "csv"])
        (['csv', 'json'], [])
        >>> names, objects = tracker_names("all")
        >>> names[:2], objects
        (['json', 'csv'], [])
    """
    wanted = list(log_with) if isinstance(log_with, list | tuple) else [log_with]
    names: list[str] = []
    objects: list[Any] = []
    for item in wanted:
        item = getattr(item, "value", item)  # Accelerate's LoggerType members
        if isinstance(item, str):
            if item == "all":
                names += [name for name in KNOWN_TRACKERS if _available(name)]
            elif item in KNOWN_TRACKERS:
                names.append(item)
            else:
                known = sorted(KNOWN_TRACKERS)
                raise ValueError(f"log_with={item!r} is not a tracker here; use one of {known} or 'all'")
        elif hasattr(item, "log"):
            objects.append(item)
        else:
            raise TypeError(f"log_with takes tracker names or objects with a log method, got {item!r}")
    return list(dict.fromkeys(names)), objects


def make_trackers(log_with: Any, project: str, logging_dir: str, init_kwargs: dict | None = None) -> list:
    """Start the trackers ``log_with`` names for the run ``project``; ``init_kwargs[name]`` goes to
    tracker ``name``. Tracker objects are started (their ``start()``, as Accelerate does) and kept.

    Examples:
        >>> import tempfile
        >>> [tracker.name for tracker in make_trackers(["json", "csv"], "run", tempfile.mkdtemp())]
        ['json', 'csv']
    """
    names, objects = tracker_names(log_with)
    trackers = []
    for name in names:
        if not _available(name):
            package = KNOWN_TRACKERS[name].package
            warnings.warn(
                f"log_with={name!r}: the {package} package is not installed, so nothing is written to it"
                f" (pip install {package})",
                stacklevel=3,
            )
            continue
        tracker = KNOWN_TRACKERS[name](project, logging_dir, **(init_kwargs or {}).get(name, {}))
        trackers.append(tracker)
    trackers += objects
    for tracker in trackers:
        if callable(getattr(tracker, "start", None)):
            tracker.start()
    return trackers
