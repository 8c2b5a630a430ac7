"""Ways to start rank processes, one small class each behind the ``Starter`` interface, chosen
once by ``select_starter``. This package runs in the kernel; what runs in the started processes is
in ``rank/``.

Everything after the start — reading output, errors, stopping — is the same for all starters.

Examples:
    >>> select_starter("fork").name
    'fork'
"""

from __future__ import annotations

from .base import StartedProcess, Starter

__all__ = ["select_starter", "Starter", "StartedProcess"]


def select_starter(start_method: str) -> Starter:
    """A new starter for a resolved start method ("fork", "spawn", "xla" or "ray": a Ray cluster).

    Each starter is imported only when chosen, so the others cost nothing.
    """
    if start_method == "fork":
        from .fork import ForkStarter

        return ForkStarter()
    if start_method == "spawn":
        from .server import ServerStarter, server_enabled

        if server_enabled():
            return ServerStarter()
        from .spawn import SpawnStarter

        return SpawnStarter()
    if start_method == "ray":
        from ..ray.starter import RayStarter

        return RayStarter()
    if start_method == "xla":
        from .xla import XlaStarter

        return XlaStarter()
    raise ValueError(f"no starter for start method {start_method!r}")
