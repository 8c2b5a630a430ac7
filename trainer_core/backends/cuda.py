"""CUDA ranks: NCCL, one GPU per local rank (``cuda:LOCAL_RANK``), DDP bound to that GPU."""

from __future__ import annotations

import torch

from .torch_distributed import TorchDistributed


class CudaBackend(TorchDistributed):
    name = "cuda"
    dist_backend = "nccl"
    autocast_device = "cuda"

    @staticmethod
    def available():
        return bool(torch.version.cuda) and torch.cuda.is_available()

    def device(self, local_rank):
        device = torch.device("cuda", local_rank % max(1, torch.cuda.device_count()))
        torch.cuda.set_device(device)
        return device

    def ddp_options(self, local_rank):
        return {"device_ids": [torch.cuda.current_device()]}

    def grad_scaler(self):
        return torch.amp.GradScaler("cuda")

    def empty_cache(self):
        torch.cuda.empty_cache()
