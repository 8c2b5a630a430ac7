"""CUDA ranks: NCCL collectives, one rank per GPU.

The GPU count comes from NVML (``PYTORCH_NVML_BASED_CUDA_CHECK=1``, set when the package is
imported), which never creates a CUDA context in the kernel.
"""

from __future__ import annotations

from .base import fork_or_spawn, more_than_found
from .probe import nvml_gpu_count


class CudaDevice:
    """Ranks on CUDA GPUs; ``num_processes=None`` means one rank per GPU."""

    name = "cuda"
    backend = "nccl"

    def __init__(self) -> None:
        self._count: int | None = None

    def count(self) -> int:
        if self._count is None:
            self._count = nvml_gpu_count()
        return self._count

    def default_processes(self) -> int:
        return self.count()

    def check_processes(self, num_processes: int) -> str | None:
        return more_than_found(self, num_processes)

    def oversubscription(self, num_processes: int) -> str | None:
        return None

    def describe(self) -> str:
        n = self.count()
        return f"{n} CUDA GPU{'s' if n != 1 else ''}"

    def resolve_start_method(self, requested: str, hazards: list[str]) -> tuple[str, str | None]:
        return fork_or_spawn(requested, hazards)

    def rank_environment(self, env: dict[str, str]) -> dict[str, str]:
        return env
