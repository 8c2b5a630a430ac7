"""In a rank: while one of the kernel's ranks compiles a graph with Inductor, the others wait for
it, then find the graph in the shared cache instead of compiling it again.

Ranks that compile the same model at the same moment all miss the cache, and N compiles fight for
the same cores. So a rank wraps Inductor's compilation of one graph (``_compile_fx_inner``, which
looks the graph up in the FX graph cache first) in a lock on a file of the kernel's compile folder:
a rank that finds it free takes it exclusively and compiles (and writes the cache); a rank that
finds it taken waits for a shared hold, so once the compiling rank is done every rank that waited
goes on at once, side by side, loading what it compiled. A graph that is already cached is loaded
by the first rank under the exclusive hold, by the others right after it: loading costs little, and
only one wait. Nothing is held while compiled code runs, so a rank waiting in a collective for a
sibling that waits for the lock cannot happen: no collective runs inside a compilation. Forward and
backward graphs (the backward is compiled at the first ``backward()``) are each handled so. The lock
is the file's ``flock``, released if its holder dies. Where torch has no ``_compile_fx_inner`` (it
is private), nothing is wrapped: the ranks compile side by side, as without the launcher.

Examples:
    >>> import tempfile, os
    >>> lock = RankCompileLock(os.path.join(tempfile.mkdtemp(), "compile.lock"))
    >>> with lock, lock:         # re-entered by the same process: one flock, exclusive (it was free)
    ...     lock.depth, lock.exclusive
    (2, True)
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
    """The lock of the processes that open ``path``: exclusive for the first to come while it is
    free, shared (after the exclusive holder is done) for those that came while it was held;
    re-entrant within one process. ``exclusive`` says which this process holds."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.depth = 0
        self.exclusive = False
        self._fd: int | None = None
        self._local = threading.RLock()

    def __enter__(self) -> RankCompileLock:
        self._local.acquire()
        if self.depth == 0:
            os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self.exclusive = True
            except BlockingIOError:  # another rank compiles: wait for it, then go on beside the others
                fcntl.flock(self._fd, fcntl.LOCK_SH)
                self.exclusive = False
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
