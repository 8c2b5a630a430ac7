"""Who this process is in the training job: built once from the environment, passed around as a value.

The launcher (or torchrun) sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
``MASTER_ADDR``/``MASTER_PORT``; without them this is a single process (on XLA the runtime says who
is who). With more than one process the default process group is created here if the user's code
has not made one yet, and reused if it has — so a second Accelerator in the same process just works.

Examples:
    >>> state = DistributedState.from_environment(use_cpu=True)
    >>> state.process_index, state.num_processes, state.device
    (0, 1, device(type='cpu'))
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

import torch

from .backends import select_backend
from .hardware import torch_tpu_installed, xla_platform

__all__ = ["DistributedState"]


@dataclass
class DistributedState:
    process_index: int
    local_process_index: int
    num_processes: int
    device: torch.device
    backend: Any

    @classmethod
    def from_environment(cls, use_cpu=False, environ=None, timeout=None):
        env = os.environ if environ is None else environ
        use_cpu = use_cpu or env.get("ACCELERATE_USE_CPU", "").lower() in ("1", "true", "yes")
        hint = env.get("NOTEBOOK_LAUNCHER_DEVICE") or _tpu_hint(env)
        backend = select_backend(use_cpu, hint)
        rank, local_rank, world = backend.topology(env)
        device = backend.device(local_rank)
        backend.connect(rank, world, timeout)  # timeout: of the process group, if it is made here
        return cls(rank, local_rank, world, device, backend)

    @property
    def distributed(self):
        return self.num_processes > 1

    @property
    def is_main_process(self):
        return self.process_index == 0

    @property
    def is_local_main_process(self):
        return self.local_process_index == 0

    def barrier(self):
        if self.distributed:
            self.backend.barrier()

    # -- the names Hugging Face Accelerate's state has, for code written against it ---------------

    @property
    def distributed_type(self) -> str:
        """Accelerate's name for this set-up: "NO", "MULTI_CPU", "MULTI_GPU" or "XLA" (equal to the
        members of ``accelerate.DistributedType``, a string enum). Code may set it, as code written
        for Accelerate sometimes does to take another branch; deleting the setting restores it."""
        override = self.__dict__.get("_distributed_type")
        if override is not None:
            return override
        if self.backend.name == "xla":
            return "XLA"
        if not self.distributed:
            return "NO"
        return "MULTI_GPU" if self.backend.name == "cuda" else "MULTI_CPU"

    @distributed_type.setter
    def distributed_type(self, value: str) -> None:
        self.__dict__["_distributed_type"] = value

    @property
    def use_distributed(self):
        return self.distributed

    @property
    def is_last_process(self):
        return self.process_index == self.num_processes - 1

    def wait_for_everyone(self):
        """Every process waits here until all have come (a no-op in one process)."""
        self.barrier()

    def _reset_state(self, reset_partial_state=False):
        """Accelerate's reset of its singleton state, which code written for it calls between runs.
        This state belongs to its Accelerator and needs none; Accelerate's shared state (made by
        ``trainer_core.compat.interop``) is reset, so the next Accelerator sets it up afresh."""
        accelerate_state = sys.modules.get("accelerate.state")
        if accelerate_state is not None:
            accelerate_state.AcceleratorState._reset_state(reset_partial_state)

    def destroy_process_group(self):
        """Tear down the default process group this state joined, if it is still up."""
        import torch.distributed as dist

        if self.backend.name != "xla" and dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()


def _tpu_hint(env):
    """Outside a launch: "tpu" on a TPU host that has torch_tpu (torch_xla's successor), "xla" on
    one with torch_xla alone or with ``PJRT_DEVICE`` set, else None (CUDA or CPU, as found)."""
    platform = xla_platform(env)
    if platform is None:
        return None
    return "tpu" if platform == "TPU" and "PJRT_DEVICE" not in env and torch_tpu_installed() else "xla"
