"""CPU ranks: gloo, no device ids, nothing to free."""

from __future__ import annotations

import torch

from .torch_distributed import TorchDistributed


class CpuBackend(TorchDistributed):
    name = "cpu"
    dist_backend = "gloo"
    autocast_device = "cpu"

    def device(self, local_rank):
        return torch.device("cpu")

    def ddp_options(self, local_rank):
        return {}

    def grad_scaler(self):
        return torch.amp.GradScaler("cpu")

    def empty_cache(self):
        pass
