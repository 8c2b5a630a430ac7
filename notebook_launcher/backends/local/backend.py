"""The local backend: ranks are processes on this machine, forked, spawned (through the start
server) or started by torch_xla, meeting at the store this kernel hosts (``rendezvous``).

Examples:
    >>> backend = LocalBackend()
    >>> options = backend.check_options(None, {})
    >>> placement = backend.place(options, PlacementRequest(num_processes=2, device="cpu", start_method="spawn"))
    >>> placement.device.name, placement.num_processes, placement.start_method
    ('cpu', 2, 'spawn')
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...choices import is_int
from ...devices import Device, select_device
from ..base import Backend, Placement, PlacementRequest, StatusListener
from ..status import StatusSection
from .preflight import fork_hazards
from .server_status import server_section

if TYPE_CHECKING:
    from ..base import Starter
    from ..plans import LaunchPlan

__all__ = ["LocalBackend", "LocalOptions", "resolve_num_processes"]


@dataclass(frozen=True)
class LocalOptions:
    """The local backend takes no options of its own: everything it needs is ``launch``'s."""


def _fork_starter() -> Starter:
    from .fork import ForkStarter

    return ForkStarter()


def _spawn_starter() -> Starter:
    from .server import ServerStarter, server_enabled

    if server_enabled():
        return ServerStarter()
    from .spawn import SpawnStarter

    return SpawnStarter()


def _xla_starter() -> Starter:
    from .xla import XlaStarter

    return XlaStarter()


# Each starter is imported only when chosen, so the others cost nothing.
STARTERS: dict[str, Callable[[], Starter]] = {"fork": _fork_starter, "spawn": _spawn_starter, "xla": _xla_starter}


class LocalBackend(Backend):
    """Ranks on this machine (``cluster=None``)."""

    name = "local"
    option_names: tuple[str, ...] = ()

    def check_options(self, cluster: str | None, options: Mapping[str, Any]) -> LocalOptions:
        if options:
            raise TypeError(f"launch() got unexpected keyword arguments: {', '.join(map(repr, options))}")
        return LocalOptions()

    def place(self, options: LocalOptions, request: PlacementRequest) -> Placement:
        """The device found or asked for, its rank count, and fork or spawn from the fork preflight."""
        chosen = select_device(request.device)
        count = resolve_num_processes(request.num_processes, chosen, request.default_num_processes)
        refused = chosen.check_precision(request.mixed_precision)
        if refused:
            raise ValueError(refused)
        method, notice = chosen.resolve_start_method(request.start_method, fork_hazards())
        notices = tuple(text for text in (chosen.oversubscription(count), notice) if text)
        return Placement(chosen, count, method, notices, chosen.stall_hint(count))

    def starter(self, plan: LaunchPlan) -> Starter:
        return STARTERS[plan.start_method]()

    def in_kernel(self) -> None:
        """Warm, in the background, the imports every rank would otherwise do (``warmup``)."""
        from .warmup import warm_in_kernel

        warm_in_kernel()

    def status(self) -> dict[str, StatusSection | None]:
        """The sidebar's start server section (``server_status``)."""
        from .server import start_server_info  # imported when a sidebar connects, not with the package

        return {"start_server": server_section(start_server_info())}

    def observe(self, listener: StatusListener) -> Callable[[], None]:
        from .server import observe_start_server

        return observe_start_server(lambda info: listener("start_server", server_section(info)))


def resolve_num_processes(num_processes: Any, device: Device, default: int | None = None) -> int:
    """The argument if given, else the kernel's chosen default, else the device's own default.

    Examples:
        >>> from notebook_launcher.devices import CpuDevice
        >>> resolve_num_processes(None, CpuDevice(), default=3)
        3
    """
    if num_processes is None:
        num_processes = default if default is not None else device.default_processes()
    if not is_int(num_processes):
        raise ValueError(
            f"num_processes must be an int, got {type(num_processes).__name__} {num_processes!r}"
            f" (found {device.describe()})"
        )
    if num_processes < 1:
        raise ValueError(f"num_processes must be at least 1, got {num_processes} (found {device.describe()})")
    refused = device.check_processes(num_processes)
    if refused:
        raise ValueError(refused)
    return int(num_processes)
