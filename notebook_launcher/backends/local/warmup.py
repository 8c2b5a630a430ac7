"""Warm, in the background, the lazy imports that every forked rank would otherwise do on its own.

Building an optimizer imports ``torch._dynamo`` lazily: 2–4 s that every rank of every launch would
pay if the kernel had not imported it before forking. So when ``notebook_launcher`` is imported in a
kernel that has torch (or as soon as it imports torch), a daemon thread imports those modules, and
``ipywidgets`` for the launch widget. No device is touched.

A fork must never copy the kernel while that thread holds an import lock (the child would wait on
it for ever): every fork of the kernel — our launches and anyone else's — first waits for the
warm-up to end (``os.register_at_fork``), at most ``FORK_WAIT`` seconds. A wait longer than
``SAY_AFTER`` seconds is said (what is being imported, then how long it took) as plain output, not
on stderr, which front ends draw as an error; a shorter one, as on most Run Alls, says nothing. It
lasts no longer than the import has left to do, which the ranks would otherwise each do.

In a kernel the warm-up runs only while no cell runs: it starts when the cell that imported torch
(or the package) has finished, and a cell that starts before it is done waits for it first. A cell
importing modules of the same import cycle at the same time (``torch.use_deterministic_algorithms``
imports ``torch._inductor``, which imports ``torch._dynamo`` and back) could otherwise meet the
warm-up's import in a module-lock cycle, and Python would raise ``_DeadlockError`` in the cell.

Examples:
    >>> start_warmup(modules=("json",))
    >>> wait_for_warmup(30)
    True
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
import time
from typing import Any

from ...interrupt_routing import kernel_thread

__all__ = ["start_warmup", "wait_for_warmup", "warm_in_kernel", "TORCH_MODULES"]

TORCH_MODULES = ("torch._dynamo",)
FORK_WAIT = 60.0
SAY_AFTER = 5.0  # seconds of waiting for the warm-up after which the waiter is told why

_lock = threading.Lock()
_threads: list[tuple[threading.Thread, tuple[str, ...]]] = []  # each warm-up, and what it imports


def start_warmup(modules: tuple[str, ...]) -> None:
    """Import ``modules`` on a daemon thread (each once); returns at once."""
    missing = tuple(name for name in modules if name not in sys.modules)
    if not missing:
        return
    with _lock:
        _threads.append((kernel_thread(_import_all, args=(missing,), name="notebook-launcher-warmup"), missing))


def _import_all(modules: tuple[str, ...]) -> None:
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # warming is an optimisation: the rank imports it itself if this failed
            pass


def wait_for_warmup(timeout: float | None = None, waiter: str = "") -> bool:
    """Wait until every warm-up started so far has finished; False if ``timeout`` passed first.

    A ``waiter`` ("the launch", "this cell") that waits longer than ``SAY_AFTER`` seconds is told
    so on stdout, with what is being imported, and then how long it waited: no long silent wait.
    """
    with _lock:
        threads = [(t, modules) for t, modules in _threads if t.is_alive() and t is not threading.current_thread()]
    if not threads:
        return True
    began = time.monotonic()
    deadline = None if timeout is None else began + timeout
    said = False
    for thread, modules in threads:
        if waiter and not said:
            thread.join(SAY_AFTER if deadline is None else min(SAY_AFTER, max(0.0, deadline - time.monotonic())))
            if thread.is_alive():
                said = True
                what = ", ".join(modules)
                print(f"{waiter} waits for the launcher's background import of {what} to finish (once a kernel)")
        thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            return False
    if said:
        print(f"{waiter} waited {time.monotonic() - began:.1f} s for it")
    return True


def warm_in_kernel() -> None:
    """Start the warm-up if this is a Jupyter kernel: torch's lazy modules once torch is imported,
    and ipywidgets (the launch widget)."""
    from ...import_hooks import after_import

    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if getattr(shell, "kernel", None) is None:
        return
    between_cells = _BetweenCells(shell)
    between_cells.add(("ipywidgets",))
    after_import("torch", lambda _torch: between_cells.add(TORCH_MODULES))


class _BetweenCells:
    """Warm-ups for a kernel: started once the running cell has finished; the next cell waits for them."""

    def __init__(self, shell: Any) -> None:
        self._pending: list[str] = []
        shell.events.register("post_run_cell", self._start)
        shell.events.register("pre_run_cell", self._wait)

    def add(self, modules: tuple[str, ...]) -> None:
        self._pending.extend(modules)

    def _start(self, *_result: Any) -> None:
        pending, self._pending = tuple(self._pending), []
        if pending:
            start_warmup(pending)

    def _wait(self, *_info: Any) -> None:
        wait_for_warmup(FORK_WAIT, waiter="notebook-launcher: this cell")


def _before_fork() -> None:
    wait_for_warmup(FORK_WAIT)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork)
