"""Ways to start the ranks, one small class each, chosen once by ``select_starter``.

A starter has ``prepare(plan)`` (run in the kernel before anything starts: may raise
``LaunchError``), ``groups(plan)`` (which local ranks each started process carries),
``start(plan, specs, pipes)`` (start one process for those ranks, return a ``WorkerProcess``) and
``cleanup()``. Everything after the start — reading output, errors, stopping — is the same for all.

Example:
    >>> select_starter("fork").name
    'fork'
"""

from __future__ import annotations

import importlib

__all__ = ["select_starter"]

_STARTERS = {"fork": ("fork", "ForkStarter"), "spawn": ("spawn", "SpawnStarter"), "xla": ("xla", "XlaStarter")}


def select_starter(start_method):
    """A new starter for a resolved start method ("fork", "spawn" or "xla").

    Starters are imported here, not at package import, so a spawned rank loading its entry module
    from this package does not pay for the others.
    """
    module, name = _STARTERS[start_method]
    return getattr(importlib.import_module(f".{module}", __name__), name)()
