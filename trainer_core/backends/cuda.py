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

    def bf16_refusal(self):
        """A GPU older than Ampere (compute capability 8.0) has no bf16 arithmetic: T4, V100, P100."""
        major, minor = torch.cuda.get_device_capability()
        if (major, minor) >= (8, 0):
            return None
        return (
            "mixed_precision='bf16' needs a GPU of compute capability 8.0 or newer (A100, L4, H100, RTX 30xx and"
            f" later); this rank's GPU is a {torch.cuda.get_device_name()} (compute capability {major}.{minor}):"
            " use mixed_precision='fp16' (autocast with a gradient scaler) or 'no'"
        )

    def peak_memory(self):
        return torch.cuda.max_memory_allocated()

    def empty_cache(self):
        torch.cuda.empty_cache()
