"""Ways to start the ranks, one small class each, chosen once by ``select_starter``.

A starter has ``prepare(plan)`` (run in the kernel before anything starts: may raise
``LaunchError``), ``start(plan, spec, pipes)`` (start one rank, return a ``WorkerProcess``) and
``cleanup()``. Everything after the start — reading output, errors, stopping — is the same for all.

Example:
    >>> select_starter("fork").name
    'fork'
"""

from __future__ import annotations

from .base import WorkerProcess
from .fork import ForkStarter
from .spawn import SpawnStarter

__all__ = ["select_starter", "WorkerProcess", "ForkStarter", "SpawnStarter"]

_STARTERS = {"fork": ForkStarter, "spawn": SpawnStarter}


def select_starter(start_method):
    """A new starter for a resolved start method ("fork" or "spawn")."""
    return _STARTERS[start_method]()
