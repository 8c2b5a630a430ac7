"""torch_tpu ranks: one chip per rank on the ``tpu`` device, collectives on torch_tpu's "tpu"
process-group backend, bf16 autocast on the chip.

torch_tpu (the successor of torch_xla) is an out-of-tree PyTorch device: ``import torch`` loads it
and adds ``torch.tpu`` (``device_count``, ``set_device``, memory statistics), so everything else is
``torch.distributed`` as on CUDA. Each spawned rank claims its own chip.

Examples (a stand-in for ``torch.tpu`` where there is no chip):
    >>> TpuBackend.name, TpuBackend.dist_backend, TpuBackend.autocast_device
    ('tpu', 'tpu', 'tpu')
"""

from __future__ import annotations

from typing import Any

import torch

from .torch_distributed import TorchDistributed


def _tpu() -> Any:
    """``torch.tpu``, which torch_tpu adds when torch is imported."""
    module = getattr(torch, "tpu", None)
    if module is None:
        raise RuntimeError(
            "the launcher chose torch_tpu's device, but torch has no 'tpu' module: is torch_tpu installed?"
        )
    return module


class TpuBackend(TorchDistributed):
    name = "tpu"
    dist_backend = "tpu"
    autocast_device = "tpu"

    def device(self, local_rank: int) -> torch.device:
        """This rank's chip: ``tpu:LOCAL_RANK`` where the rank sees every chip, ``tpu:0`` where it
        sees its own alone."""
        tpu = _tpu()
        count = max(1, int(tpu.device_count()))
        device = torch.device("tpu", local_rank % count)
        set_device = getattr(tpu, "set_device", None)
        if set_device is not None:
            set_device(device)
        return device

    def ddp_options(self, local_rank: int) -> dict[str, Any]:
        return {}

    def grad_scaler(self) -> torch.amp.GradScaler:
        return torch.amp.GradScaler("tpu")

    def peak_memory(self) -> int:
        peak = getattr(_tpu(), "max_memory_allocated", None)
        return int(peak()) if peak is not None else 0

    def empty_cache(self) -> None:
        empty = getattr(_tpu(), "empty_cache", None)
        if empty is not None:
            empty()
