"""XLA ranks (TPU cores, or torch_xla's CPU device with ``PJRT_DEVICE=CPU``), started by torch_xla.

The count comes from the host (``probe.xla_device_count``), never from the XLA runtime: starting it
in the kernel would make the kernel unforkable. torch_xla runs either one rank or one per device.
"""

from __future__ import annotations

from ..errors import LaunchError
from .base import NothingToSay, more_than_found
from .probe import xla_device_count

# XLA ranks learn who they are, and meet, through torch_xla's runtime, not these torchrun variables.
_RUNTIME_OWNED = (
    "RANK",
    "LOCAL_RANK",
    "ROLE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE",
    "GROUP_WORLD_SIZE",
    "ROLE_NAME",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCH_DIST_INIT_BARRIER",
)


class XlaDevice(NothingToSay):
    """torch_xla's devices; its ranks learn who they are from the XLA runtime.

    Examples:
        >>> XlaDevice().rank_environment({"RANK": "3", "WORLD_SIZE": "8"})
        {'WORLD_SIZE': '8'}
    """

    name = "xla"
    backend = "xla"

    def count(self) -> int:
        return xla_device_count()

    def default_processes(self) -> int:
        return self.count()

    def check_processes(self, num_processes: int) -> str | None:
        """torch_xla's ``xmp.spawn`` takes nprocs=None (every core) or 1; anything else is refused."""
        found = self.count()
        refused = more_than_found(self, num_processes)
        if refused or num_processes in (1, found):
            return refused
        return (
            f"num_processes={num_processes} is not possible with torch_xla: it runs either 1 process or one"
            f" rank per core ({found} here); pass num_processes=None or 1"
        )

    def describe(self) -> str:
        n = self.count()
        return f"{n} XLA device{'s' if n != 1 else ''}"

    def resolve_start_method(self, requested: str, hazards: list[str]) -> tuple[str, str | None]:
        """torch_xla's ``xmp.spawn`` forks from a notebook: spawn is refused, and so is an unsafe fork."""
        if requested == "spawn":
            raise ValueError(
                "start_method='spawn' is not possible on XLA devices: in a notebook torch_xla must fork;"
                " use 'auto' or 'fork'"
            )
        if hazards:
            raise LaunchError(f"cannot start XLA ranks from this kernel: {'; '.join(hazards)}")
        return "xla", None

    def rank_environment(self, env: dict[str, str]) -> dict[str, str]:
        return {key: value for key, value in env.items() if key not in _RUNTIME_OWNED}
