"""Where a training run keeps its checkpoints (and logs): ``ProjectConfiguration``, as in Accelerate.

With ``automatic_checkpoint_naming=True``, ``Accelerator.save_state()`` with no directory writes
``<project_dir>/checkpoints/checkpoint_<iteration>`` and keeps the last ``total_limit`` of them;
``load_state()`` with no directory loads the newest complete one (a run restarted after a crash
resumes from it) and does nothing when there is none yet. A new run in a used ``project_dir``
(that did not ``load_state()``) numbers after the highest checkpoint there, so its own checkpoints
are the newest: numbered from 0, the first would be pruned at once as the oldest, and a later
``load_state()`` would resume the old run. The checkpoint just written is never pruned.

Examples:
    >>> import tempfile
    >>> config = ProjectConfiguration(tempfile.mkdtemp(), automatic_checkpoint_naming=True, total_limit=2)
    >>> os.path.basename(next_checkpoint(config))
    'checkpoint_0'
    >>> latest_checkpoint(config) is None
    True
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from .atomic import discard, is_complete

__all__ = ["ProjectConfiguration", "next_checkpoint", "latest_checkpoint", "prune_checkpoints"]

_NAME = re.compile(r"checkpoint_(\d+)(\.prev|\.tmp)?$")


@dataclass
class ProjectConfiguration:
    """Accelerate's ``ProjectConfiguration``: the same fields and meaning.

    Args:
        project_dir: the run's folder (checkpoints go under ``checkpoints/``).
        logging_dir: where trackers write (default ``project_dir``).
        automatic_checkpoint_naming: number checkpoints ``checkpoint_0``, ``checkpoint_1``, ...
        total_limit: how many automatically named checkpoints to keep (None: all).
        iteration: the number the next checkpoint gets.
        save_on_each_node: every node writes its own copy (else only the main process writes).
    """

    project_dir: str | None = None
    logging_dir: str | None = None
    automatic_checkpoint_naming: bool = False
    total_limit: int | None = None
    iteration: int = 0
    save_on_each_node: bool = False

    def __post_init__(self) -> None:
        if self.logging_dir is None:
            self.logging_dir = self.project_dir

    def set_directories(self, project_dir: str | None = None) -> None:
        """Accelerate's helper: set ``project_dir`` (and ``logging_dir`` when unset)."""
        self.project_dir = project_dir
        if self.logging_dir is None:
            self.logging_dir = project_dir

    @property
    def checkpoints_dir(self) -> str:
        if self.project_dir is None:
            raise ValueError("automatic checkpoint naming needs a project_dir: Accelerator(project_dir=...)")
        return os.path.join(self.project_dir, "checkpoints")


def _numbered(config: ProjectConfiguration) -> dict[int, list[str]]:
    """checkpoint number -> the folders of that checkpoint (final, .prev, .tmp) that exist."""
    found: dict[int, list[str]] = {}
    if not os.path.isdir(config.checkpoints_dir):
        return found
    for name in os.listdir(config.checkpoints_dir):
        match = _NAME.match(name)
        if match:
            found.setdefault(int(match.group(1)), []).append(os.path.join(config.checkpoints_dir, name))
    return found


def next_checkpoint(config: ProjectConfiguration) -> str:
    """The folder the next automatically named checkpoint goes to: ``checkpoint_<iteration>``, or
    after the highest one already there (``config.iteration`` follows).

    Examples:
        >>> import tempfile
        >>> config = ProjectConfiguration(tempfile.mkdtemp(), automatic_checkpoint_naming=True)
        >>> os.makedirs(os.path.join(config.checkpoints_dir, "checkpoint_7"))
        >>> os.path.basename(next_checkpoint(config)), config.iteration
        ('checkpoint_8', 8)
    """
    config.iteration = max([config.iteration, *(number + 1 for number in _numbered(config))])
    return os.path.join(config.checkpoints_dir, f"checkpoint_{config.iteration}")


def latest_checkpoint(config: ProjectConfiguration) -> str | None:
    """The newest checkpoint with a complete copy (final, .prev or sealed .tmp), or None."""
    for number in sorted(_numbered(config), reverse=True):
        base = os.path.join(config.checkpoints_dir, f"checkpoint_{number}")
        if any(is_complete(path) for path in (base, f"{base}.prev", f"{base}.tmp")):
            return base
    return None


def prune_checkpoints(config: ProjectConfiguration, keep: str | None = None) -> None:
    """Keep the newest ``total_limit`` complete checkpoints, and ``keep`` (the one just written)
    whatever its number. A save that never finished (a ``checkpoint_<n>.tmp`` with no complete
    copy of ``n``) does not count and is removed. Only what the library wrote is removed: a
    checkpoint folder that also holds a file of someone else's keeps that file (and the folder)."""
    if config.total_limit is None:
        return
    found = _numbered(config)
    just_written = _NAME.match(os.path.basename(keep)) if keep else None
    kept = int(just_written.group(1)) if just_written is not None else None
    complete = [number for number in sorted(found) if number == kept or any(is_complete(p) for p in found[number])]
    unfinished = [number for number in found if number not in complete]
    for number in [*unfinished, *complete[: max(0, len(complete) - config.total_limit)]]:
        if number != kept:
            for path in found[number]:
                discard(path)
