"""A cgroup per rank process, where this machine lets the user make one, so that nothing a rank
started outlives it, whatever it did to its name, session or environment.

A rank's descendants are ended by its process group and by the mark in their environment
(``marked``), but a process can leave both: a daemon made the python-daemon way (fork, ``setsid``,
fork, no new program), one started with ``env={}``, one that overwrites its argv and environment to
set its title (as setproctitle, nginx and PostgreSQL do). None can leave its cgroup. So where a
cgroup v2 hierarchy is writable (root in a container, a systemd user session's delegated
subtree), the kernel makes ``notebook-launcher-<kernel pid>/`` beside its own cgroup's processes,
one folder in it per rank process, and each rank moves itself into its folder before it runs
anything (``join``). When the rank ends, or the kernel dies (the guardian), the folder's every
process is killed (``cgroup.kill``, or one by one) and the folder removed. Where none is writable,
``kernel_root`` is None and groups and marks are all there is.

This module imports only the standard library: the guardian runs it.

Examples:
    >>> root = kernel_root(create=False)   # made at this kernel's first launch, where available()
    >>> root is None or os.path.basename(root) == f"notebook-launcher-{os.getpid()}"
    True
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

__all__ = ["available", "kernel_root", "new_cgroup", "join", "members", "kill_and_remove", "sweep", "disabled"]

_PREFIX = "notebook-launcher-"
_SWITCH = "NOTEBOOK_LAUNCHER_CGROUPS"  # "off": groups and marks only


def disabled() -> bool:
    """Whether ``NOTEBOOK_LAUNCHER_CGROUPS=off`` asks for no cgroups."""
    return os.environ.get(_SWITCH, "on").lower() in ("off", "0", "no", "false")


def _cgroup2_mount() -> str | None:
    try:
        with open("/proc/self/mountinfo") as file:
            for line in file:
                before, _, after = line.partition(" - ")
                if after.split(" ", 1)[0] == "cgroup2":
                    return before.split(" ")[4]
    except OSError:
        pass
    return None


def _own_path(pid: int | str = "self") -> str | None:
    try:
        with open(f"/proc/{pid}/cgroup") as file:
            for line in file:
                if line.startswith("0::"):
                    return line[3:].strip()
    except OSError:
        pass
    return None


def available() -> bool:
    """Whether rank cgroups can be made here (nothing is made to tell)."""
    mount, own = _cgroup2_mount(), _own_path()
    if disabled() or mount is None or own is None:
        return False
    return os.access(mount + own.rstrip("/"), os.W_OK)


def kernel_root(kernel_pid: int | None = None, create: bool = True) -> str | None:
    """The folder of kernel ``kernel_pid``'s rank cgroups (this process's, made when ``create``),
    or None where no cgroup v2 hierarchy is writable here."""
    if disabled():
        return None
    mount, own = _cgroup2_mount(), _own_path()
    if mount is None or own is None:
        return None
    root = os.path.join(mount + own.rstrip("/"), f"{_PREFIX}{kernel_pid or os.getpid()}")
    if create:
        try:
            os.makedirs(root, exist_ok=True)
        except OSError:
            return None
    return root if os.access(os.path.join(root, "cgroup.procs"), os.W_OK) else None


def new_cgroup(root: str, name: str) -> str | None:
    """A new cgroup ``name`` under ``root`` for one rank process, or None when it cannot be made."""
    path = os.path.join(root, name)
    try:
        os.mkdir(path)
    except OSError:
        return None
    return path


def join(path: str | None) -> bool:
    """Move this process into the cgroup ``path`` (its children are born there); whether it did."""
    if not path:
        return False
    try:
        with open(os.path.join(path, "cgroup.procs"), "w") as file:
            file.write("0")
        return True
    except OSError:
        return False


def members(path: str) -> list[int]:
    """The pids in the cgroup ``path`` and below it."""
    found: list[int] = []
    for folder, _, files in os.walk(path):
        if "cgroup.procs" in files:
            try:
                with open(os.path.join(folder, "cgroup.procs")) as file:
                    found.extend(int(line) for line in file if line.strip())
            except OSError:
                pass
    return found


def kill_and_remove(path: str, timeout: float = 5.0) -> bool:
    """SIGKILL every process in the cgroup ``path`` (and below), then remove it; whether it is gone.
    Waits up to ``timeout`` seconds for the killed to leave it."""
    if not os.path.isdir(path):
        return True
    try:
        with open(os.path.join(path, "cgroup.kill"), "w") as file:  # Linux 5.14+: the kernel does it, races included
            file.write("1")
    except OSError:
        pass
    deadline = time.monotonic() + timeout
    while True:
        pids = members(path)
        for pid in pids:  # without cgroup.kill; or one forked while it was being read
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if _remove(path) or time.monotonic() > deadline:
            return not os.path.isdir(path)
        time.sleep(0.01)  # the killed are leaving the cgroup: bounded by the deadline


def _remove(path: str) -> bool:
    for folder, folders, _ in os.walk(path, topdown=False):
        for name in folders:
            try:
                os.rmdir(os.path.join(folder, name))
            except OSError:
                pass
    try:
        os.rmdir(path)
    except FileNotFoundError:
        return True
    except OSError:  # still populated
        return False
    return True


def sweep(alive: Callable[[int], bool]) -> int:
    """Remove the rank cgroups of kernels that no longer run (killed before their guardian could);
    returns how many. ``alive(pid)`` tells a running kernel (``scratch.pid_alive``)."""
    mount, own = _cgroup2_mount(), _own_path()
    if disabled() or mount is None or own is None:
        return 0
    parent = mount + own.rstrip("/")
    removed = 0
    try:
        names = os.listdir(parent)
    except OSError:
        return 0
    for name in names:
        pid = name[len(_PREFIX) :]
        if not name.startswith(_PREFIX) or not pid.isdigit() or alive(int(pid)):
            continue
        removed += kill_and_remove(os.path.join(parent, name), timeout=1.0)
    return removed
