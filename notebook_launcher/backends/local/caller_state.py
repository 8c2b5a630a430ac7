"""The thread that starts a launch keeps its thread-local values alive in the ranks forked for it.

Ranks are forked from a supervisor thread (``launching.supervisor`` says why). In a forked process
Python deletes the state of every thread but the one that forked, the cell's thread among them,
and with it the dictionary holding that thread's ``threading.local`` values (asyncio's running
loop, torch's and ipykernel's per-thread state). Each object freed there writes to a page the rank
still shares with the kernel: a copy-on-write fault, ~7 µs each on a virtual machine. Measured in a
kernel with torch loaded: ~320 faults per rank, about 2 ms of every rank's start, which a fork from
the cell's own thread does not pay. While the kernel holds a reference to that dictionary, its
deletion in the rank is a decrement and nothing is freed there.

The reference is taken in the thread that starts the launch (a starter's ``prepare``), the only
thread that can ask for its own state, and replaced by the next launch's: one dictionary is held
at a time, and a thread that ends leaves its values to the next launch to let go of.

Example (what ``ForkStarter.prepare`` does)::

    keep_caller_state()
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

__all__ = ["keep_caller_state"]

_kept: Any = None


def keep_caller_state() -> None:
    """Hold the calling thread's thread-state dictionary until the next call (see the module docstring)."""
    global _kept
    _kept = _thread_state_dict()


def _thread_state_dict() -> dict | None:
    """A new reference to the calling thread's state dictionary (``PyThreadState_GetDict``), or None
    where the interpreter does not offer one."""
    get_dict = _get_dict_function()
    if get_dict is None:
        return None
    address = get_dict()  # a borrowed pointer; reading it as an object below takes a reference
    return ctypes.cast(address, ctypes.py_object).value if address else None


@functools.cache
def _get_dict_function() -> Any:
    """``PyThreadState_GetDict`` as a ctypes function (made once: each prototype is a new class), or None."""
    try:
        return ctypes.PYFUNCTYPE(ctypes.c_void_p)(("PyThreadState_GetDict", ctypes.pythonapi))
    except (AttributeError, OSError):
        return None
