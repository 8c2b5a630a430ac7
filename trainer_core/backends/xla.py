"""XLA ranks (TPU cores; torch_xla's CPU device in tests): torch_xla's runtime, collectives and loader.

Rank and world come from the XLA runtime (ranks may be threads, so not from the environment).
Gradients are averaged by ``xm.optimizer_step`` rather than DDP; prepared loaders feed the device
through ``MpDeviceLoader``; checkpoints go through ``xm.save`` (which moves tensors to the CPU);
bf16 autocast runs on the XLA device. torch_xla is imported only when this backend is chosen.
"""

from __future__ import annotations

import torch


class XlaBackend:
    name = "xla"
    dist_backend = None
    autocast_device = "xla"
    wraps_ddp = False

    def __eq__(self, other):  # equal to any backend of the same kind (a state survives pickling)
        return type(self) is type(other)

    def __hash__(self):
        return hash(type(self))

    def __init__(self):
        import torch_xla
        import torch_xla.core.xla_model as xm
        import torch_xla.runtime as xr

        self._torch_xla, self._xm, self._xr = torch_xla, xm, xr

    def topology(self, env):
        xr = self._xr
        return xr.global_ordinal(), xr.local_ordinal(), xr.world_size()

    def connect(self, rank, world, timeout=None):
        pass  # torch_xla's runtime is already connected in every rank

    def device(self, local_rank):
        return self._torch_xla.device()

    def ddp_options(self, local_rank):
        return {}

    def grad_scaler(self):
        raise ValueError("mixed_precision='fp16' is not supported on XLA devices; use 'bf16' (native on TPUs)")

    def bf16_refusal(self):
        return None

    def peak_memory(self):
        return None

    def empty_cache(self):
        pass

    def all_gather(self, tensor, world):
        gathered = self._xm.all_gather(tensor, dim=0)
        return list(torch.chunk(gathered, world, dim=0))

    def all_reduce_sum(self, tensor):
        return self._xm.all_reduce(self._xm.REDUCE_SUM, tensor.clone())

    def all_gather_object(self, obj, world):
        return self._xm.mesh_reduce("trainer_core.all_gather_object", obj, list)

    def broadcast_object(self, obj, src=0):
        return self._xm.mesh_reduce("trainer_core.broadcast_object", obj, lambda parts: parts[src])

    def barrier(self):
        self._xm.rendezvous("trainer_core.barrier")

    def optimizer_step(self, optimizer, closure=None):
        """Average gradients across ranks, step, and run the step's graph (``xm.optimizer_step``)."""
        return self._xm.optimizer_step(optimizer, optimizer_args={"closure": closure} if closure else {})

    def device_loader(self, loader, device):
        from torch_xla.distributed.parallel_loader import MpDeviceLoader

        return _SizedDeviceLoader(MpDeviceLoader(loader, device), loader)

    def save(self, obj, file):
        self._xm.save(obj, file)

    def load_location(self, device):
        """torch.load cannot place tensors on XLA; load_state_dict copies them onto the device."""
        return "cpu"


class _SizedDeviceLoader:
    """MpDeviceLoader keeps order and count; this also keeps ``len``."""

    def __init__(self, device_loader, loader):
        self._device_loader = device_loader
        self._loader = loader

    def __iter__(self):
        return iter(self._device_loader)

    def __len__(self):
        return len(self._loader)
