"""A launch on torch_tpu's chips, from a real kernel, with the stand-in package
(tests/torch_tpu_standin: ``torch.tpu`` without a chip, the one edge that cannot exist here) and the
host's chip count set in the kernel (its PCI devices are the other). Everything else is real: the
plan, the spawned ranks, torch_tpu's launch environment computed in a process of its own, the
first-use recorder, trainer_core's backend in the ranks. ``make tpu-pass`` runs a launch on a TPU."""

from __future__ import annotations

import os
from pathlib import Path

from kernel_session import KernelSession

from notebook_launcher.devices.tpu import TorchTpuDevice, launch_environment

STAND_IN = str(Path(__file__).resolve().parent.parent / "torch_tpu_standin")
SETUP = (
    "import os, sys, torch, torch_tpu\n"
    "import notebook_launcher.devices.tpu as _tpu\n"
    "_tpu.tpu_chips = lambda: 2  # the host's PCI devices: the stand-in's two chips\n"
    "from notebook_launcher import launch, notebook_launcher\n"
    "def where():\n"
    "    import os, sys, torch_tpu\n"
    "    from trainer_core.backends import select_backend\n"
    "    device = select_backend(False, os.environ['NOTEBOOK_LAUNCHER_DEVICE']).device(int(os.environ['LOCAL_RANK']))\n"
    "    keys = ('RANK', 'NOTEBOOK_LAUNCHER_DEVICE', 'TORCH_TPU_TOPOLOGY', 'TORCH_TPU_SLICEBUILDER_ADDRESSES')\n"
    "    found = {key: os.environ.get(key) for key in keys}\n"
    "    return {**found, 'device': str(device), 'forked': 'ipykernel' in sys.modules}\n"
)


def _stand_in_path():
    return os.pathsep.join(filter(None, [STAND_IN, os.environ.get("PYTHONPATH")]))


def test_a_tpu_launch_spawns_a_rank_per_chip_each_on_its_chip_with_torch_tpus_environment():
    kernel = KernelSession(env={"PYTHONPATH": _stand_in_path(), "STANDIN_TPU_CHIPS": "2"})
    try:
        kernel.ok(SETUP)
        kernel.ok("job = launch(where, device='tpu', display='none'); job.wait()", timeout=180)
        ranks = kernel.eval("job.results")
        assert [rank["device"] for rank in ranks] == ["tpu:0", "tpu:1"]
        assert {rank["NOTEBOOK_LAUNCHER_DEVICE"] for rank in ranks} == {"tpu"}
        assert not any(rank["forked"] for rank in ranks)  # fresh interpreters: torch_tpu refuses a fork
        first, second = ranks
        assert first["TORCH_TPU_TOPOLOGY"] == second["TORCH_TPU_TOPOLOGY"] == "2,1,1"
        addresses = first["TORCH_TPU_SLICEBUILDER_ADDRESSES"].split(",")
        assert (
            len(addresses) == 2
            and second["TORCH_TPU_SLICEBUILDER_ADDRESSES"] == first["TORCH_TPU_SLICEBUILDER_ADDRESSES"]
        )
        # torch_tpu memoizes what it sets in the process that calls it: the kernel never calls it
        assert kernel.eval("[key for key in os.environ if key.startswith('TORCH_TPU_')]") == []
        again = kernel.eval("notebook_launcher(where, device='tpu', num_processes=1)", timeout=180)
        assert again["TORCH_TPU_TOPOLOGY"] == "1,1,1" and again["device"] == "tpu:0"

        refused = kernel.run("notebook_launcher(where, device='tpu', num_processes=3)")
        assert refused.error is not None and "more than the 2 TPU chips (torch_tpu) found" in refused.error["evalue"]
        refused = kernel.run("notebook_launcher(where, device='tpu', start_method='fork')")
        assert refused.error is not None and "a forked process cannot use the TPU" in refused.error["evalue"]

        kernel.ok("torch.tpu._lazy_init()  # what a first tensor on the chip does")
        refused = kernel.run("notebook_launcher(where, device='tpu')")
        assert refused.error is not None, refused.stdout
        message = refused.error["evalue"]
        assert "torch_tpu was started in this kernel (first at Cell In[" in message, message
        assert "torch.tpu._lazy_init()" in message and "ranks cannot use them" in message
    finally:
        kernel.shutdown()


def test_torch_tpus_launch_environment_is_computed_apart_and_a_count_without_topology_is_refused(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", _stand_in_path())
    monkeypatch.setenv("STANDIN_TPU_CHIPS", "4")
    before = dict(os.environ)
    four = launch_environment(4)
    assert four["TORCH_TPU_TOPOLOGY"] == "2,2,1" and len(four["TORCH_TPU_SLICEBUILDER_ADDRESSES"].split(",")) == 4
    assert dict(os.environ) == before
    device = TorchTpuDevice()
    base = {"RANK": "0", "LOCAL_WORLD_SIZE": "2", "MASTER_PORT": "29511", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}
    rank0 = device.rank_environment(base)
    rank1 = device.rank_environment({**base, "RANK": "1"})
    assert rank0["TORCH_TPU_SLICEBUILDER_ADDRESSES"] == rank1["TORCH_TPU_SLICEBUILDER_ADDRESSES"]
    assert (rank0["MASTER_ADDR"], rank1["RANK"]) == ("127.0.0.1", "1")  # the torchrun variables are ours
    relaunch = device.rank_environment({**base, "MASTER_PORT": "29512"})
    assert relaunch["TORCH_TPU_SLICEBUILDER_ADDRESSES"] != rank0["TORCH_TPU_SLICEBUILDER_ADDRESSES"]
    try:
        launch_environment(3)
    except Exception as refused:
        assert type(refused).__name__ == "LaunchError"
        assert str(refused) == (
            "torch_tpu could not set up a launch of 3 ranks here: RuntimeError: No TPU topology found for count: 3"
        )
    else:
        raise AssertionError("3 ranks on 4 chips has no topology: refused")


def test_the_stand_in_never_loads_in_the_process_that_forks_the_other_tests_ranks():
    """The suite's own process (``pytest tests`` collects every module for doctests) must not import
    the stand-in: every rank forked from it would inherit its ``torch.tpu`` and a renamed PrivateUse1
    device, and torch's device lookups there fail (45 trainer tests did, once)."""
    import sys

    import torch

    assert "torch_tpu" not in sys.modules
    assert not hasattr(torch, "tpu")
