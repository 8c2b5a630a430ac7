"""Where a detached launch lives on disk: one private folder per launch, in the project folder.

``<project>/.notebook-launcher/detached/<id>/`` (``NOTEBOOK_LAUNCHER_DETACHED_DIR`` overrides the
parent) holds what a later kernel needs to follow the launch: the plan (``plan.pkl``, the function
and its arguments, cloudpickled), the host process (``host.json``: its pid and start time, so a
reused pid is not taken for it), the journal of what the ranks said (``journal.jsonl``), the end
(``end.pkl``) and the host's own output (``host.log``). Folders are 0700 and files 0600: a
detached launch is its user's alone, as the kernel is.

Examples:
    >>> import tempfile, os
    >>> root = tempfile.mkdtemp()
    >>> folder = LaunchFolder.create("ab12cd34", root)
    >>> oct(os.stat(folder.path).st_mode & 0o777), folder.id
    ('0o700', 'ab12cd34')
    >>> folder.write_bytes("end.pkl", b"x"); oct(os.stat(folder.file("end.pkl")).st_mode & 0o777)
    '0o600'
    >>> [found.id for found in launch_folders(root)]
    ['ab12cd34']
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["LaunchFolder", "detached_root", "launch_folders", "host_state"]

_ROOT_VARIABLE = "NOTEBOOK_LAUNCHER_DETACHED_DIR"
HOST_START_WAIT = 60.0  # seconds a host may take to say its pid before its launch counts as lost


def detached_root() -> str:
    """The folder that holds this project's detached launches (the kernel's working folder's
    ``.notebook-launcher/detached``, or ``$NOTEBOOK_LAUNCHER_DETACHED_DIR``)."""
    return os.environ.get(_ROOT_VARIABLE) or os.path.join(os.getcwd(), ".notebook-launcher", "detached")


def _private_folder(path: str) -> None:
    os.makedirs(path, mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)


@dataclass(frozen=True)
class LaunchFolder:
    """The folder of one detached launch."""

    path: str

    @classmethod
    def create(cls, launch_id: str, root: str | None = None) -> LaunchFolder:
        """A new, private folder for launch ``launch_id`` under ``root`` (``detached_root()``)."""
        parent = root or detached_root()
        _private_folder(parent)
        path = os.path.join(parent, launch_id)
        os.mkdir(path, 0o700)
        return cls(path)

    @property
    def id(self) -> str:
        return os.path.basename(self.path)

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def has(self, name: str) -> bool:
        return os.path.exists(self.file(name))

    def write_bytes(self, name: str, data: bytes) -> None:
        """Write ``name`` whole or not at all (a reader never sees half of it), readable by its owner only."""
        temporary = self.file(f".{name}.tmp")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
        os.replace(temporary, self.file(name))

    def read_bytes(self, name: str) -> bytes:
        return Path(self.file(name)).read_bytes()

    def open_appending(self, name: str) -> int:
        """``name`` opened for appending (created 0600): a descriptor."""
        return os.open(self.file(name), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def write_host(self, pid: int, started: float) -> None:
        self.write_bytes("host.json", json.dumps({"pid": pid, "started": started}).encode())

    def host(self) -> tuple[int, float] | None:
        """The host process's pid and start time, once it has said them."""
        try:
            found = json.loads(self.read_bytes("host.json"))
        except (OSError, ValueError):
            return None
        return int(found["pid"]), float(found["started"])

    def host_running(self, host: tuple[int, float] | None = None) -> bool:
        """Whether the launch may still end with an end: it has none yet, and its host runs (or,
        not having said its pid yet, was started less than ``HOST_START_WAIT`` seconds ago)."""
        if self.has("end.pkl"):
            return False
        host = host or self.host()
        if host is not None:
            return host_state(*host) == "running"
        try:
            age = time.time() - os.stat(self.file("plan.pkl")).st_mtime
        except OSError:
            return False
        return age < HOST_START_WAIT

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def host_state(pid: int, started: float) -> str:
    """What became of the host process ``pid`` that started at ``started`` (``time.time()``):
    "running"; "ended" (gone, or ended and not yet reaped by its parent); or "reused" (it ended and
    another process has its pid now).

    Examples:
        >>> import psutil
        >>> host_state(os.getpid(), psutil.Process().create_time()), host_state(os.getpid(), 0.0)
        ('running', 'reused')
    """
    import psutil

    try:
        process = psutil.Process(pid)
        if abs(process.create_time() - started) >= 1.0:
            return "reused"
        return "ended" if process.status() == psutil.STATUS_ZOMBIE else "running"
    except psutil.Error:
        return "ended"


def launch_folders(root: str | None = None) -> list[LaunchFolder]:
    """Every detached launch's folder under ``root`` (``detached_root()``), the oldest first."""
    parent = root or detached_root()
    try:
        names = [entry for entry in os.scandir(parent) if entry.is_dir() and not entry.name.startswith(".")]
    except OSError:
        return []
    names.sort(key=_made_at)
    return [LaunchFolder(entry.path) for entry in names]


def _made_at(entry: os.DirEntry) -> int:
    """When the launch was made: its plan's time (a folder's own changes with every file in it)."""
    try:
        return os.stat(os.path.join(entry.path, "plan.pkl")).st_mtime_ns
    except OSError:
        return entry.stat().st_mtime_ns
