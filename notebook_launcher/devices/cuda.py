"""CUDA ranks: NCCL collectives, one rank per GPU.

The GPU count comes from NVML (``PYTORCH_NVML_BASED_CUDA_CHECK=1``, set when the package is
imported), which never creates a CUDA context in the kernel.
"""

from __future__ import annotations

import os

from .base import fork_or_spawn, more_than_found
from .probe import cuda_capabilities, nvml_gpu_count

BF16_CAPABILITY = (8, 0)  # Ampere: the first GPUs with bf16 arithmetic (T4, V100, P100 are older)


def bf16_refusal(gpus: list[dict]) -> str | None:
    """Why bf16 cannot run on ``gpus`` (``probe.cuda_capabilities()``), naming the first GPU that
    lacks it and what to use instead; None when every GPU has it.

    Examples:
        >>> refusal = bf16_refusal([{"index": 0, "name": "Tesla T4", "capability": (7, 5)}])
        >>> refusal.split("; ")[1].split(": ")[0]
        'GPU 0 here is a Tesla T4 (compute capability 7.5)'
        >>> refusal.endswith("use mixed_precision='fp16' (autocast with a gradient scaler) or 'no'")
        True
        >>> bf16_refusal([{"index": 0, "name": "NVIDIA A100-SXM4-40GB", "capability": (8, 0)}]) is None
        True
    """
    for gpu in gpus:
        if gpu["capability"] < BF16_CAPABILITY:
            major, minor = gpu["capability"]
            return (
                "mixed_precision='bf16' needs a GPU of compute capability 8.0 or newer (A100, L4, H100, RTX 30xx"
                f" and later); GPU {gpu['index']} here is a {gpu['name']} (compute capability {major}.{minor}):"
                " use mixed_precision='fp16' (autocast with a gradient scaler) or 'no'"
            )
    return None


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

    def check_precision(self, mixed_precision: str) -> str | None:
        """bf16 on a GPU older than Ampere is refused before any rank starts (read through
        nvidia-smi: the kernel's CUDA stays uninitialised)."""
        return bf16_refusal(cuda_capabilities()) if mixed_precision == "bf16" else None

    def stall_hint(self, num_processes: int) -> str | None:
        """NCCL between GPUs joined by PCIe whose peer-to-peer copies do not work (Kaggle's 2×T4)
        waits for ever in the first collective; NCCL_P2P_DISABLE=1 sends through host memory."""
        if num_processes < 2 or os.environ.get("NCCL_P2P_DISABLE"):
            return None
        return (
            "on GPUs joined by PCIe without working peer-to-peer (Kaggle's 2×T4, many workstations) NCCL's first"
            " collective can wait for ever: run os.environ['NCCL_P2P_DISABLE'] = '1' in the notebook and launch again"
        )

    def oversubscription(self, num_processes: int) -> str | None:
        return None

    def describe(self) -> str:
        n = self.count()
        return f"{n} CUDA GPU{'s' if n != 1 else ''}"

    def resolve_start_method(self, requested: str, hazards: list[str]) -> tuple[str, str | None]:
        return fork_or_spawn(requested, hazards)

    def rank_environment(self, env: dict[str, str]) -> dict[str, str]:
        return env
