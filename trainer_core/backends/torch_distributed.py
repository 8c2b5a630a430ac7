"""Collectives and process-group set-up through ``torch.distributed``, shared by the CPU and CUDA backends."""

from __future__ import annotations

import torch
import torch.distributed as dist


class TorchDistributed:
    """Mixin: rank and world from the torchrun environment, collectives from torch.distributed."""

    def __eq__(self, other):  # stateless: equal to any backend of the same kind (a state survives pickling)
        return type(self) is type(other)

    def __hash__(self):
        return hash(type(self))

    dist_backend: str = ""  # "gloo" or "nccl", set by the backend
    wraps_ddp = True  # gradients are averaged by DistributedDataParallel

    def topology(self, env):
        """(rank, local rank, world size) of this process."""
        return int(env.get("RANK", 0)), int(env.get("LOCAL_RANK", 0)), int(env.get("WORLD_SIZE", 1))

    def bf16_refusal(self):
        """Why bf16 autocast cannot run on this device, or None (CPUs run it)."""
        return None

    def peak_memory(self):
        """Bytes of device memory this process has held at most (its allocator's peak), or None
        where the device has no such counter (CPU)."""
        return None

    def connect(self, rank, world, timeout=None):
        """Create the default process group unless the user's code (or another Accelerator) did."""
        if world > 1 and not dist.is_initialized():
            dist.init_process_group(self.dist_backend, rank=rank, world_size=world, timeout=timeout)

    def all_gather(self, tensor, world):
        parts = [torch.empty_like(tensor) for _ in range(world)]
        dist.all_gather(parts, tensor)
        return parts

    def all_reduce_sum(self, tensor):
        result = tensor.clone()
        dist.all_reduce(result, op=dist.ReduceOp.SUM)
        return result

    def all_gather_object(self, obj, world):
        parts = [None] * world
        dist.all_gather_object(parts, obj)
        return parts

    def broadcast_object(self, obj, src=0):
        box = [obj]
        dist.broadcast_object_list(box, src=src)
        return box[0]

    def barrier(self):
        dist.barrier()

    def optimizer_step(self, optimizer, closure=None):
        return optimizer.step(closure) if closure is not None else optimizer.step()

    def device_loader(self, loader, device):
        return loader

    def save(self, obj, file):
        torch.save(obj, file)

    def load_location(self, device):
        """Where ``torch.load`` puts checkpoint tensors."""
        return device
