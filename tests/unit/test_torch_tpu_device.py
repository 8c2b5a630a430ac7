"""torch_tpu's chips as a launch target, without a TPU: the host's PCI devices are a folder the test
makes (the edge that cannot exist here), torch_tpu's ``torch.tpu`` a namespace the test sets.
tests/launch/test_torch_tpu.py runs the launch itself on the stand-in package; ``make tpu-pass``
runs it on a real TPU."""

from __future__ import annotations

import os
import sys
import types

import pytest
import torch

from notebook_launcher import devices
from notebook_launcher.devices import TorchTpuDevice, XlaDevice, cuda_init_site, select_device
from notebook_launcher.devices import tpu as tpu_device
from notebook_launcher.errors import LaunchError
from trainer_core.backends import TpuBackend, select_backend
from trainer_core.hardware import tpu_chips


def _pci_device(root, name, vendor, group):
    device = root / "pci" / name
    device.mkdir(parents=True)
    (device / "vendor").write_text(f"{vendor}\n")
    (root / "groups" / group).mkdir(parents=True, exist_ok=True)
    os.symlink(root / "groups" / group, device / "iommu_group")


def test_chips_are_googles_pci_devices_that_vfio_exposes(tmp_path):
    _pci_device(tmp_path, "0000:00:04.0", "0x1ae0", "5")  # a TPU chip
    _pci_device(tmp_path, "0000:00:05.0", "0x1ae0", "6")  # another
    _pci_device(tmp_path, "0000:00:06.0", "0x1ae0", "7")  # gVNIC: Google's, not handed to VFIO
    _pci_device(tmp_path, "0000:00:07.0", "0x8086", "8")  # someone else's, in VFIO
    vfio = tmp_path / "vfio"
    vfio.mkdir()
    for group in ("5", "6", "8"):
        (vfio / group).touch()
    assert tpu_chips(pci_root=str(tmp_path / "pci"), vfio_root=str(vfio)) == 2
    assert tpu_chips(pci_root=str(tmp_path / "none"), vfio_root=str(vfio)) == 0


def test_tpu_is_torch_tpu_where_it_is_installed_and_xla_stays_torch_xla(monkeypatch):
    monkeypatch.setattr(devices, "is_tpu_host", lambda: True)
    monkeypatch.setattr(devices, "torch_tpu_installed", lambda: True)
    assert isinstance(select_device("auto"), TorchTpuDevice)
    assert isinstance(select_device("tpu"), TorchTpuDevice)
    assert isinstance(select_device("xla"), XlaDevice)
    monkeypatch.setattr(devices, "torch_tpu_installed", lambda: False)
    assert isinstance(select_device("auto"), XlaDevice)
    assert isinstance(select_device("tpu"), XlaDevice)


def test_torch_tpu_ranks_are_spawned_one_per_chip_and_fork_is_refused(monkeypatch):
    monkeypatch.setattr(tpu_device, "tpu_chips", lambda: 4)
    device = TorchTpuDevice()
    assert (device.name, device.backend, device.default_processes()) == ("tpu", "tpu", 4)
    assert device.describe() == "4 TPU chips (torch_tpu)"
    assert device.resolve_start_method("auto", hazards=["CUDA was initialized in this kernel"]) == ("spawn", None)
    with pytest.raises(ValueError, match="a forked process cannot use the TPU"):
        device.resolve_start_method("fork", hazards=[])
    assert device.check_processes(4) is None and device.check_processes(1) is None
    assert device.check_processes(5) == "num_processes=5 is more than the 4 TPU chips (torch_tpu) found; use at most 4"


def test_a_kernel_that_started_torch_tpu_is_refused_naming_where_it_did(monkeypatch):
    calls = []
    stand_in = types.SimpleNamespace(is_initialized=lambda: bool(calls), _lazy_init=lambda: calls.append(1))
    monkeypatch.setitem(sys.modules, "torch_tpu", types.ModuleType("torch_tpu"))
    monkeypatch.setattr(torch, "tpu", stand_in, raising=False)
    monkeypatch.setattr(cuda_init_site, "_first_sites", {})
    cuda_init_site.install_tpu()
    assert tpu_device.tpu_claimed() is None  # torch_tpu loaded, no chip touched: the kernel may launch
    torch.tpu._lazy_init()  # what a first tensor on the device calls
    claimed = tpu_device.tpu_claimed()
    assert claimed is not None and "torch_tpu was started in this kernel" in claimed
    assert "test_torch_tpu_device.py, line" in claimed and "torch.tpu._lazy_init()" in claimed
    with pytest.raises(LaunchError, match="ranks cannot use them"):
        TorchTpuDevice().resolve_start_method("auto", hazards=[])


def test_without_torch_tpu_loaded_nothing_is_claimed_and_nothing_is_imported(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch_tpu", raising=False)
    assert tpu_device.tpu_claimed() is None
    assert "torch_tpu" not in sys.modules


def test_trainer_core_runs_on_torch_tpus_device_when_the_launcher_says_so():
    backend = select_backend(use_cpu=False, device_hint="tpu")
    assert isinstance(backend, TpuBackend)
    assert (backend.dist_backend, backend.autocast_device) == ("tpu", "tpu")
    assert select_backend(use_cpu=True, device_hint="tpu").name == "cpu"
