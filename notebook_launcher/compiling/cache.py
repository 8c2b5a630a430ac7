"""The kernel's compile cache: one private folder that every local rank compiles into and reads from.

``torch.compile`` keeps what Inductor compiled (the FX graph cache, AOTAutograd's cache, the
generated code) under ``TORCHINDUCTOR_CACHE_DIR``, and Triton its kernels under
``TRITON_CACHE_DIR``; a process that finds a graph there loads it instead of compiling it. By
default both are per user and shared by every program of the user, and a rank forked or spawned
afresh would fill them alongside its siblings. Here every rank of the kernel's launches gets one
folder of the kernel's (``notebook-launcher-compile-<pid>-*``, mode 0700: no other user reads or
plants code in it), kept while the kernel lives, so a relaunch after a failure or an edit elsewhere
starts warm, and removed when the kernel exits (or, killed, by the next kernel's sweep). A
variable the user set in the kernel is kept: their own cache wins. (Importing Inductor writes its
default folder into ``TORCHINDUCTOR_CACHE_DIR``: that value is not taken for the user's.)

Examples:
    >>> env = compile_environment({})
    >>> sorted(env) == ["NOTEBOOK_LAUNCHER_COMPILE_LOCK", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"]
    True
    >>> compile_environment({}, attempt="a1b2")["NOTEBOOK_LAUNCHER_COMPILE_MARKS"].endswith("/marks/a1b2")
    True
    >>> env["TORCHINDUCTOR_CACHE_DIR"].startswith(compile_cache_dir())
    True
    >>> "TORCHINDUCTOR_CACHE_DIR" in compile_environment({"TORCHINDUCTOR_CACHE_DIR": "/my/cache"})
    False
    >>> "TORCHINDUCTOR_CACHE_DIR" in compile_environment({"TORCHINDUCTOR_CACHE_DIR": _inductor_default()})
    True
"""

from __future__ import annotations

import atexit
import getpass
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Mapping

from ..scratch import scratch_dir
from .serial import LOCK_VARIABLE, MARKS_VARIABLE

__all__ = ["compile_cache_dir", "compile_environment", "forget_attempt", "remove_compile_cache"]

_lock = threading.Lock()
_folders: dict[int, str] = {}  # by pid: a launch from inside a rank has a folder of its own


def compile_cache_dir() -> str:
    """This kernel's compile cache folder (made on first use, removed when the kernel exits)."""
    pid = os.getpid()
    with _lock:
        if pid not in _folders or not os.path.isdir(_folders[pid]):
            _folders[pid] = scratch_dir("compile")
            atexit.register(remove_compile_cache)
        return _folders[pid]


def remove_compile_cache() -> None:
    """Remove this kernel's compile cache folder, if it made one (at exit; ``%reset`` of the caches)."""
    with _lock:
        folder = _folders.pop(os.getpid(), None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


def compile_environment(environ: Mapping[str, str] = os.environ, attempt: str | None = None) -> dict[str, str]:
    """The variables a local rank gets so that it compiles into, and reads from, the kernel's cache;
    with ``attempt`` (one launch attempt's name), the folder where its ranks mark the graphs compiled."""
    folder = compile_cache_dir()
    env = {LOCK_VARIABLE: os.path.join(folder, "compile.lock")}
    if attempt is not None:
        env[MARKS_VARIABLE] = os.path.join(folder, "marks", attempt)
    for variable, sub in (("TORCHINDUCTOR_CACHE_DIR", "inductor"), ("TRITON_CACHE_DIR", "triton")):
        if environ.get(variable) in (None, "", _inductor_default()):
            env[variable] = os.path.join(folder, sub)
    return env


def forget_attempt(attempt: str) -> None:
    """Remove an ended attempt's marks (``compile_environment(attempt=)``)."""
    folder = _folders.get(os.getpid())
    if folder is not None:
        shutil.rmtree(os.path.join(folder, "marks", attempt), ignore_errors=True)


def _inductor_default() -> str:
    """The folder Inductor writes into ``TORCHINDUCTOR_CACHE_DIR`` when it is imported and finds it
    unset (``torch._inductor.runtime.cache_dir_utils.default_cache_dir``, computed without torch)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid_{os.getuid()}"
    return os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))
