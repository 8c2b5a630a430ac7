"""In a rank: while one of the kernel's ranks compiles a graph with Inductor, the others wait for
it, then find the graph in the shared cache instead of compiling it again.

Ranks that compile the same model at the same moment all miss the cache, and N compiles fight for
the same cores. So a rank wraps Inductor's compilation of one graph (``_compile_fx_inner``, which
looks the graph up in the FX graph cache first) in an exclusive lock on a file of the kernel's
compile folder: one rank at a time looks a graph up and, missing it, compiles it and writes the
cache; the ranks that waited find it there and load it, one after another (a load costs little).
The hold is exclusive for loads too: a rank that went on beside a loading one could miss the next
graph in the cache and compile it while its sibling compiles the same graph. Nothing is held while
compiled code runs, so a rank waiting in a collective for a sibling that waits for the lock cannot
happen: no collective runs inside a compilation. Forward and backward graphs (the backward is
compiled at the first ``backward()``) are each handled so. The lock is the file's ``flock``,
released if its holder dies. Where torch has no ``_compile_fx_inner`` (it is private), nothing is
wrapped: the ranks compile side by side, as without the launcher.

Examples:
    >>> import tempfile, os
    >>> lock = RankCompileLock(os.path.join(tempfile.mkdtemp(), "compile.lock"))
    >>> with lock, lock:         # re-entered by the same process: one flock
    ...     lock.depth
    2
"""

from __future__ import annotations

import fcntl
import functools
import os
import threading
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

__all__ = ["LOCK_VARIABLE", "RankCompileLock", "compile_one_at_a_time", "serialized"]

LOCK_VARIABLE = "NOTEBOOK_LAUNCHER_COMPILE_LOCK"  # the lock file, set by the kernel (``cache``)
_WRAPPED = "_notebook_launcher_one_at_a_time"


class RankCompileLock:
    """The exclusive lock of the processes that open ``path``, one holder at a time, re-entrant
    within one process (threads of the process take turns)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.depth = 0
        self._fd: int | None = None
        self._local = threading.RLock()

    def __enter__(self) -> RankCompileLock:
        self._local.acquire()
        if self.depth == 0:
            os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(self._fd, fcntl.LOCK_EX)
        self.depth += 1
        return self

    def __exit__(self, *exc: object) -> None:
        self.depth -= 1
        if self.depth == 0 and self._fd is not None:
            os.close(self._fd)  # releases the flock
            self._fd = None
        self._local.release()


def serialized(compile_graph: Callable[..., Any], lock: RankCompileLock) -> Callable[..., Any]:
    """``compile_graph`` run under ``lock`` (once wrapped, never twice)."""
    if getattr(compile_graph, _WRAPPED, False):
        return compile_graph

    @functools.wraps(compile_graph)
    def one_at_a_time(*args: Any, **kwargs: Any) -> Any:
        with lock:
            return compile_graph(*args, **kwargs)

    setattr(one_at_a_time, _WRAPPED, True)
    return one_at_a_time


def _wrap_inductor(module: ModuleType, lock: RankCompileLock) -> None:
    compile_graph = getattr(module, "_compile_fx_inner", None)
    if callable(compile_graph):
        module._compile_fx_inner = serialized(compile_graph, lock)  # type: ignore[attr-defined]


def compile_one_at_a_time(environ: Mapping[str, str] = os.environ) -> bool:
    """In a launched rank: serialize Inductor's graph compilations with the kernel's other ranks,
    from whenever Inductor is imported (nothing is imported here); whether the kernel asked for it."""
    path = environ.get(LOCK_VARIABLE)
    if not path:
        return False
    from ..import_hooks import after_import

    lock = RankCompileLock(path)
    after_import("torch._inductor.compile_fx", lambda module: _wrap_inductor(module, lock))
    return True
