"""torch_tpu's chips (the successor of torch_xla): one spawned rank per chip.

A chip belongs to whichever process touches it first, so the kernel never does: the count comes
from the host (``probe.tpu_chips``: Google's PCI devices exposed through VFIO), the launch's
environment from torch_tpu's own ``set_tpu_launch_env`` run in a short-lived process of its own
(it memoizes what it picks, ports included, in the process that calls it, and a kernel launches
many times), and the ranks are spawned, as torch_tpu asks (it refuses a forked process the TPU).

Examples:
    >>> TorchTpuDevice().resolve_start_method("spawn", hazards=[])
    ('spawn', None)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from ..errors import LaunchError
from .base import NothingToSay, more_than_found
from .probe import tpu_chips

__all__ = ["TorchTpuDevice", "launch_environment", "tpu_claimed"]

# Run as its own process: what torch_tpu's set_tpu_launch_env adds to the environment for argv[1]
# ranks on this host, as JSON. torch_tpu is imported, not autoloaded: nothing touches a chip.
_LAUNCH_ENV = """
import json, os, sys
before = dict(os.environ)
import torch, torch_tpu
tpu = getattr(torch, "tpu", None)
if tpu is not None and hasattr(tpu, "distributed"):
    set_launch_env = tpu.distributed.set_tpu_launch_env
else:
    from torch_tpu._internal.distributed.distributed import set_tpu_launch_env as set_launch_env
set_launch_env(nproc_per_node=int(sys.argv[1]))
print(json.dumps({k: v for k, v in os.environ.items() if before.get(k) != v}))
"""
_TORCHRUN_OWNED = ("WORLD_SIZE", "NODE_RANK", "NNODES", "MASTER_ADDR", "MASTER_PORT")  # ours win
_launch_envs: dict[tuple[str, str], dict[str, str]] = {}  # (MASTER_PORT, ranks) -> its variables


class TorchTpuDevice(NothingToSay):
    """torch_tpu's chips: spawned ranks on the ``tpu`` device, collectives on its "tpu" backend."""

    name = "tpu"
    backend = "tpu"

    def count(self) -> int:
        return tpu_chips()

    def default_processes(self) -> int:
        return max(self.count(), 1)

    def check_processes(self, num_processes: int) -> str | None:
        return more_than_found(self, num_processes)

    def describe(self) -> str:
        n = self.count()
        return f"{n} TPU chip{'s' if n != 1 else ''} (torch_tpu)"

    def resolve_start_method(self, requested: str, hazards: list[str]) -> tuple[str, str | None]:
        """Always spawn (the kernel's fork hazards do not matter then); refused when the kernel has
        claimed the chips itself.

        Raises:
            ValueError: ``requested="fork"``.
            LaunchError: torch_tpu's runtime was started in this kernel.
        """
        if requested == "fork":
            raise ValueError(
                "start_method='fork' is not possible with torch_tpu: a forked process cannot use the TPU,"
                " so its ranks are spawned; use 'auto' or 'spawn'"
            )
        claimed = tpu_claimed()
        if claimed:
            raise LaunchError(claimed)
        return "spawn", None

    def rank_environment(self, env: dict[str, str]) -> dict[str, str]:
        """The torchrun variables plus torch_tpu's launch variables (its chips' topology and the
        addresses they meet at), the same for every rank of one launch."""
        key = (env.get("MASTER_PORT", ""), env.get("LOCAL_WORLD_SIZE", "1"))
        if key not in _launch_envs:
            _launch_envs.clear()  # one launch's at a time: a relaunch picks new ports
            _launch_envs[key] = launch_environment(int(key[1]))
        added = {k: v for k, v in _launch_envs[key].items() if k not in _TORCHRUN_OWNED}
        return {**env, **added}


def launch_environment(nproc_per_node: int, python: str = sys.executable, timeout: float = 120) -> dict[str, str]:
    """What torch_tpu's ``set_tpu_launch_env(nproc_per_node=...)`` sets for a launch on this host,
    computed in a process of its own.

    Raises:
        LaunchError: torch_tpu refused (no chips, no topology for that many chips), with its words.
    """
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    done = subprocess.run(
        [python, "-c", _LAUNCH_ENV, str(nproc_per_node)], capture_output=True, text=True, env=env, timeout=timeout
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise LaunchError(f"torch_tpu could not set up a launch of {nproc_per_node} ranks here: {last}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def tpu_claimed() -> str | None:
    """Why this kernel cannot hand the chips to ranks (torch_tpu's runtime started here, and it keeps
    them), naming the cell that started it when known; None when torch_tpu was not started here.
    Never imports torch_tpu."""
    if "torch_tpu" not in sys.modules:
        return None
    tpu = getattr(sys.modules.get("torch"), "tpu", None)
    is_initialized = getattr(tpu, "is_initialized", None)
    if is_initialized is None or not is_initialized():
        return None
    from .cuda_init_site import first_site

    site = first_site("tpu")
    where = f" (first at {site})" if site else ""
    return (
        f"torch_tpu was started in this kernel{where}, and it keeps the TPU chips for this process:"
        " ranks cannot use them. Restart the kernel and touch the TPU (tpu tensors, torch.tpu calls)"
        " only inside the launched function"
    )
