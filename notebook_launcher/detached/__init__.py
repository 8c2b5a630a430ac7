"""Launches that outlive their kernel (``launch(..., detach=True)``): the ranks and their
supervision run in a host process of their own, what they say is kept in the project folder, and
any later kernel lists them (``detached_launches()``) and follows one (``attach()``).

Without ``detach=True`` nothing changes: a launch ends with its kernel.

Examples:
    >>> from notebook_launcher import attach, detached_launches, launch
    >>> job = launch(train, num_processes=2, detach=True)   # doctest: +SKIP
    >>> # ... the kernel restarts ...
    >>> job = attach()                                      # doctest: +SKIP
    >>> job.wait()                                          # doctest: +SKIP
"""

from .handle import DetachedLaunch
from .starting import DetachedInfo, attach, detached_launches, start_detached

__all__ = ["DetachedLaunch", "DetachedInfo", "attach", "detached_launches", "start_detached"]
