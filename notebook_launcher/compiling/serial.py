"""In a rank: while one of the kernel's ranks compiles a graph with Inductor, the others wait for
it, then load it from the shared cache side by side instead of compiling it again.

Ranks that compile the same model at the same moment all miss the cache, and N compiles fight for
the same cores. So a rank wraps Inductor's compilation of one graph (``_compile_fx_inner``, which
looks the graph up in the FX graph cache first) in an exclusive lock on a file of the kernel's
compile folder: the first rank to reach a graph looks it up and, missing it, compiles it and writes
the cache, then marks the graph done for this launch. Ranks run the same program, so a launch's
ranks meet their graphs in the same order: the n-th graph of one is the n-th of the others. A rank
that reaches a graph marked done loads it from the cache without the lock, beside its siblings; one
that reaches it first waits for the lock, and finds the mark once it has it (its sibling compiled
the graph meanwhile) or compiles it itself. A rank going on to its next graph while siblings still
load the last one cannot compile a graph twice: an unmarked graph is only ever compiled under the
lock. A rank whose graphs differ (rank-dependent code) at worst compiles one beside its siblings,
as without the launcher. Nothing is held while compiled code runs, so a rank waiting in a
collective for a sibling that waits for the lock cannot happen: no collective runs inside a
compilation. Forward and backward graphs (the backward is compiled at the first ``backward()``) are
each handled so. The lock is the file's ``flock``, released if its holder dies; the marks are files
of a folder of the launch's attempt. Where torch has no ``_compile_fx_inner`` (it is private),
nothing is wrapped: the ranks compile side by side, as without the launcher.

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

__all__ = ["LOCK_VARIABLE", "MARKS_VARIABLE", "GraphMarks", "RankCompileLock", "compile_one_at_a_time", "serialized"]

LOCK_VARIABLE = "NOTEBOOK_LAUNCHER_COMPILE_LOCK"  # the lock file, set by the kernel (``cache``)
MARKS_VARIABLE = "NOTEBOOK_LAUNCHER_COMPILE_MARKS"  # the folder of this attempt's compiled graphs' marks
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


class GraphMarks:
    """The graphs of this launch compiled so far, by their order in the rank: the n-th graph this
    process compiles is marked done in ``folder`` (one empty file each) once it is in the cache.
    Without a folder, nothing is ever marked: every graph is taken under the lock."""

    def __init__(self, folder: str | None) -> None:
        self.folder = folder
        self.count = 0

    def next(self) -> str | None:
        """The mark of the graph this process compiles next (None without a folder)."""
        self.count += 1
        return None if self.folder is None else os.path.join(self.folder, str(self.count))

    @staticmethod
    def done(mark: str | None) -> bool:
        return mark is not None and os.path.exists(mark)

    def mark(self, mark: str | None) -> None:
        if mark is not None and self.folder is not None:
            os.makedirs(self.folder, mode=0o700, exist_ok=True)
            with open(mark, "a"):
                pass


def serialized(
    compile_graph: Callable[..., Any], lock: RankCompileLock, marks: GraphMarks | None = None
) -> Callable[..., Any]:
    """``compile_graph`` run under ``lock``, unless ``marks`` says a sibling compiled this graph
    already (once wrapped, never twice)."""
    if getattr(compile_graph, _WRAPPED, False):
        return compile_graph
    marks = marks or GraphMarks(None)
    inside = threading.local()  # a graph compiled within this thread's own compilation is part of it

    @functools.wraps(compile_graph)
    def one_at_a_time(*args: Any, **kwargs: Any) -> Any:
        if getattr(inside, "depth", 0):
            return compile_graph(*args, **kwargs)
        mark = marks.next()
        inside.depth = 1
        try:
            if not marks.done(mark):
                with lock:
                    if not marks.done(mark):
                        compiled = compile_graph(*args, **kwargs)
                        marks.mark(mark)
                        return compiled
            return compile_graph(*args, **kwargs)  # in the cache: loaded beside the siblings
        finally:
            inside.depth = 0

    setattr(one_at_a_time, _WRAPPED, True)
    return one_at_a_time


def _wrap_inductor(module: ModuleType, lock: RankCompileLock, marks: GraphMarks) -> None:
    compile_graph = getattr(module, "_compile_fx_inner", None)
    if callable(compile_graph):
        module._compile_fx_inner = serialized(compile_graph, lock, marks)  # type: ignore[attr-defined]


def compile_one_at_a_time(environ: Mapping[str, str] = os.environ) -> bool:
    """In a launched rank: serialize Inductor's graph compilations with the kernel's other ranks,
    from whenever Inductor is imported (nothing is imported here); whether the kernel asked for it."""
    path = environ.get(LOCK_VARIABLE)
    if not path:
        return False
    from ..import_hooks import after_import

    lock, marks = RankCompileLock(path), GraphMarks(environ.get(MARKS_VARIABLE))
    after_import("torch._inductor.compile_fx", lambda module: _wrap_inductor(module, lock, marks))
    return True
