"""Persistent workers: start ranks once, then run functions and notebook cells on all of them
(``start_workers``, ``%dist`` / ``%%dist``), keeping each rank's state between calls.

Kernel side: ``handle`` (``start_workers``, ``Workers``), ``router`` (each call's output to its
cell), ``magics``. Rank side: ``serve`` (the call loop), ``source`` (a cell's code, run as IPython
runs it).
"""

from .handle import Workers
from .starting import current_workers, start_workers

__all__ = ["Workers", "current_workers", "start_workers"]
