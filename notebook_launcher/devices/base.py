"""The device interface every launch target implements, and the start rule CPUs and GPUs share.

Examples:
    >>> fork_or_spawn("auto", hazards=[])
    ('fork', None)
    >>> fork_or_spawn("auto", hazards=["CUDA was initialized in this kernel"])[0]
    'spawn'
"""

from __future__ import annotations

import multiprocessing
from typing import Protocol

from ..errors import LaunchError

__all__ = ["Device", "NothingToSay", "fork_or_spawn", "more_than_found"]


class Device(Protocol):
    """Where ranks run: how many fit, how they start and what their environment says.

    Implementations find all of it without initializing CUDA or the XLA runtime in the kernel.
    """

    name: str  # "cpu", "cuda" or "xla"
    backend: str  # the torch.distributed backend its ranks use

    def count(self) -> int:
        """Devices found (usable CPU cores, visible GPUs, XLA devices)."""
        ...

    def default_processes(self) -> int:
        """Ranks when ``num_processes=None`` and the kernel has no chosen default."""
        ...

    def check_processes(self, num_processes: int) -> str | None:
        """None when ``num_processes`` ranks can run here, else why not (raised as ValueError)."""
        ...

    def check_precision(self, mixed_precision: str) -> str | None:
        """None when ``mixed_precision`` runs on these devices, else why not (raised as ValueError)."""
        ...

    def stall_hint(self, num_processes: int) -> str | None:
        """What most often stalls ``num_processes`` ranks on these devices and its remedy, added to a
        stall's message; None when nothing device-specific is known."""
        ...

    def oversubscription(self, num_processes: int) -> str | None:
        """A one-line warning when the ranks are allowed but share devices, else None."""
        ...

    def describe(self) -> str:
        """The devices found, in words ("2 CPUs", "1 CUDA GPU")."""
        ...

    def resolve_start_method(self, requested: str, hazards: list[str]) -> tuple[str, str | None]:
        """(start method, notice) for ``requested`` given the kernel's fork ``hazards``."""
        ...

    def rank_environment(self, env: dict[str, str]) -> dict[str, str]:
        """The torchrun environment of one rank, adjusted for this device."""
        ...


class NothingToSay:
    """The defaults of a device with no precision refusal, no stall hint and no oversubscription
    warning (one rank per TPU chip or XLA device: the count check refuses more)."""

    def check_precision(self, mixed_precision: str) -> str | None:
        return None

    def stall_hint(self, num_processes: int) -> str | None:
        return None

    def oversubscription(self, num_processes: int) -> str | None:
        return None


def more_than_found(device: Device, num_processes: int) -> str | None:
    """The refusal for more ranks than devices (one rank per GPU or XLA device), else None."""
    found = device.count()
    if num_processes > found:
        return f"num_processes={num_processes} is more than the {device.describe()} found; use at most {found}"
    return None


def fork_or_spawn(requested: str, hazards: list[str]) -> tuple[str, str | None]:
    """The start rule of CPUs and GPUs: "auto" forks a fork-safe kernel and spawns (with a notice) otherwise.

    Raises:
        LaunchError: ``requested="fork"`` while the kernel has a fork hazard.
        ValueError: ``requested="fork"`` where the platform cannot fork.
    """
    if requested == "spawn":
        return "spawn", None
    if "fork" not in multiprocessing.get_all_start_methods():
        if requested == "fork":
            raise ValueError("start_method='fork' is not available on this platform; use 'spawn' or 'auto'")
        return "spawn", None
    if not hazards:
        return "fork", None
    reasons = "; ".join(hazards)
    if requested == "fork":
        raise LaunchError(
            f"cannot fork this kernel: {reasons}. Restart the kernel and keep device work inside"
            f" the launched function, or pass start_method='spawn'"
        )
    return "spawn", (
        f"notebook_launcher: {reasons}, so workers are spawned instead of forked"
        f" (notebook data passed to them is pickled into every worker)"
    )
