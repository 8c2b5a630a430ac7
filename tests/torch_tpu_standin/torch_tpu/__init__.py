"""A stand-in for torch_tpu where there is no TPU: the tests' edge, as the GPU traps' fake
``nvidia-smi`` is theirs. Importing it adds ``torch.tpu`` with what the launcher and trainer_core ask
of torch_tpu: ``distributed.set_tpu_launch_env`` (which, like torch_tpu's, sets
``TORCH_TPU_TOPOLOGY`` and ``TORCH_TPU_SLICEBUILDER_ADDRESSES`` only where unset, and refuses a
count it has no topology for), ``device_count``, ``set_device``, ``is_initialized`` and the
``_lazy_init`` that a first use of the device calls. The ``tpu`` device name is torch's
PrivateUse1 device renamed, as torch_tpu does; it has no kernels: no tensor lives on it.

``STANDIN_TPU_CHIPS`` (default 4) is the host's chip count.
"""

from __future__ import annotations

import os
import socket
import types

import torch

CHIPS = int(os.environ.get("STANDIN_TPU_CHIPS", "4"))
_TOPOLOGIES = {1: "1,1,1", 2: "2,1,1", 4: "2,2,1", 8: "2,4,1"}  # v5e's single-host shapes
_state = {"initialized": False, "device": None}


def set_tpu_launch_env(*, nnodes=None, nproc_per_node=None):
    count = CHIPS if nproc_per_node is None else nproc_per_node
    if count not in _TOPOLOGIES or count > CHIPS:
        raise RuntimeError(f"No TPU topology found for count: {count}")
    os.environ.setdefault("TORCH_TPU_TOPOLOGY", _TOPOLOGIES[count])
    if "TORCH_TPU_SLICEBUILDER_ADDRESSES" not in os.environ:
        ports = []
        for _ in range(count):
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                ports.append(probe.getsockname()[1])
        os.environ["TORCH_TPU_SLICEBUILDER_ADDRESSES"] = ",".join(f"localhost:{port}" for port in ports)


def _lazy_init():
    _state["initialized"] = True


def _set_device(device):
    _lazy_init()
    _state["device"] = str(device)


if "tpu" not in torch._C._get_privateuse1_backend_name():
    torch.utils.rename_privateuse1_backend("tpu")
torch.tpu = types.SimpleNamespace(
    distributed=types.SimpleNamespace(set_tpu_launch_env=set_tpu_launch_env),
    device_count=lambda: CHIPS,
    is_initialized=lambda: _state["initialized"],
    _lazy_init=_lazy_init,
    set_device=_set_device,
    current=lambda: _state["device"],
)
