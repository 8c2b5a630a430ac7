"""What this host has, read without starting anything: CPUs, CUDA GPUs, TPU chips, the XLA platform.

Dependency-free (no torch import unless torch is already loaded, no CUDA or XLA runtime), so the
launcher, the sidebar's inventory and trainer_core all ask the same questions the same way: one TPU
detector, one GPU counter.

Examples:
    >>> parse_nvidia_smi("0, Tesla T4, 15360\\n1, Tesla T4, 15360\\n")[1]
    {'index': 1, 'name': 'Tesla T4', 'memory_mib': 15360}
    >>> xla_platform({"PJRT_DEVICE": "CPU"}, accel_glob="/nonexistent*")
    'CPU'
"""

from __future__ import annotations

import ctypes
import functools
import glob
import importlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

__all__ = [
    "usable_cpus",
    "nvml_gpu_count",
    "cuda_gpus",
    "parse_nvidia_smi",
    "cuda_capabilities",
    "cuda_driver_started",
    "parse_capabilities",
    "tpu_cores",
    "xla_platform",
    "is_tpu_host",
    "xla_device_count",
    "tpu_chips",
    "torch_tpu_installed",
]

_TPU_VARIABLES = ("TPU_ACCELERATOR_TYPE", "TPU_NAME", "ISTPUVM", "COLAB_TPU_ADDR", "TPU_WORKER_ID")
_ACCEL = "/dev/accel*"
_PCI = "/sys/bus/pci/devices"
_VFIO = "/dev/vfio"
_GOOGLE_PCI_VENDOR = "0x1ae0"


def usable_cpus() -> int:
    """The number of CPUs this process may run on (its affinity mask, not the machine's total)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def nvml_gpu_count() -> int:
    """Count visible CUDA GPUs without initializing CUDA; 0 on a CPU-only build or host.

    torch counts through NVML because importing ``notebook_launcher`` sets
    ``PYTORCH_NVML_BASED_CUDA_CHECK=1``.
    """
    # not sys.modules: while another thread (the sidebar's subshell) imports torch, that holds a
    # half-initialized module; the import machinery waits for it to finish
    torch: Any = importlib.import_module("torch")
    if not torch.version.cuda:
        return 0
    return int(torch.cuda.device_count())


def parse_nvidia_smi(text: str) -> list[dict]:
    """GPUs from ``nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader,nounits``."""
    gpus = []
    for line in text.strip().splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) == 3 and parts[0].isdigit():
            memory = int(parts[2]) if parts[2].isdigit() else None
            gpus.append({"index": int(parts[0]), "name": parts[1], "memory_mib": memory})
    return gpus


def cuda_gpus() -> list[dict]:
    """Visible GPUs with names and memory, from ``nvidia-smi`` (a separate process); [] without one."""
    return _visible(parse_nvidia_smi(_smi("index,name,memory.total")))


def cuda_driver_started() -> bool:
    """Whether this process has started the CUDA driver (``cuInit``), asked without starting it:
    the driver library is looked up only if already loaded, and its GPU count answers
    CUDA_ERROR_NOT_INITIALIZED until ``cuInit`` ran. False where there is no driver."""
    try:
        driver = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:  # not loaded by anything in this process (or no NVIDIA driver at all)
        return False
    count = ctypes.c_int()
    return driver.cuDeviceGetCount(ctypes.byref(count)) == 0


def parse_capabilities(text: str) -> list[dict]:
    """GPUs from ``nvidia-smi --query-gpu=index,name,compute_cap --format=csv,noheader``.

    Examples:
        >>> parse_capabilities("0, Tesla T4, 7.5\\n1, NVIDIA H100 80GB HBM3, 9.0\\n")[0]
        {'index': 0, 'name': 'Tesla T4', 'capability': (7, 5)}
    """
    gpus = []
    for line in text.strip().splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) == 3 and parts[0].isdigit() and re.fullmatch(r"\d+\.\d+", parts[2]):
            major, minor = parts[2].split(".")
            gpus.append({"index": int(parts[0]), "name": parts[1], "capability": (int(major), int(minor))})
    return gpus


def cuda_capabilities() -> list[dict]:
    """Visible GPUs with their compute capability, from ``nvidia-smi`` (CUDA stays uninitialised);
    [] without one, or with a driver too old to report it (before 510)."""
    return _visible(parse_capabilities(_smi("index,name,compute_cap")))


def _smi(fields: str) -> str:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return ""
    try:
        return subprocess.run(
            [smi, f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def _visible(gpus: list[dict]) -> list[dict]:
    """``gpus`` (nvidia-smi's, every GPU of the host) as ``CUDA_VISIBLE_DEVICES`` orders and limits them."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and all(part.strip().isdigit() for part in visible.split(",") if part.strip()):
        wanted = [int(part) for part in visible.split(",") if part.strip()]
        gpus = [gpu for index in wanted for gpu in gpus if gpu["index"] == index]
    return gpus


def tpu_cores(environ: Mapping[str, str] | None = None, accel_glob: str = _ACCEL) -> tuple[int, str | None]:
    """TPU cores on this host: from ``TPU_ACCELERATOR_TYPE`` (e.g. "v2-8" → 8) or /dev/accel devices.

    Examples:
        >>> tpu_cores({"TPU_ACCELERATOR_TYPE": "v3-8"})
        (8, 'v3-8')
    """
    env = os.environ if environ is None else environ
    kind = env.get("TPU_ACCELERATOR_TYPE", "")
    match = re.fullmatch(r"v\d+[a-z]*-(\d+)", kind)
    if match:
        return int(match.group(1)), kind
    return len(_chips(accel_glob)), kind or None


def xla_platform(environ: Mapping[str, str] | None = None, accel_glob: str = _ACCEL) -> str | None:
    """The platform torch_xla would run on here: "TPU" on a TPU VM (Colab, Kaggle, Cloud), "CPU" when
    ``PJRT_DEVICE=CPU`` asks for torch_xla's CPU device, another ``PJRT_DEVICE`` as given, else None.

    Looks at the host only; the XLA runtime is not touched.

    Examples:
        >>> xla_platform({"TPU_ACCELERATOR_TYPE": "v3-8"}, accel_glob="/nonexistent*")
        'TPU'
        >>> xla_platform({}, accel_glob="/nonexistent*") is None
        True
    """
    env = os.environ if environ is None else environ
    requested = env.get("PJRT_DEVICE", "").upper()
    if requested:
        return requested
    return "TPU" if is_tpu_host(env, accel_glob) else None


def is_tpu_host(environ: Mapping[str, str] | None = None, accel_glob: str = _ACCEL) -> bool:
    """A TPU VM (Colab, Kaggle, Cloud): PJRT_DEVICE=TPU, a TPU variable, or TPU chips in /dev.

    Examples:
        >>> is_tpu_host({"PJRT_DEVICE": "CPU"}, accel_glob="/nonexistent*")
        False
        >>> is_tpu_host({"TPU_ACCELERATOR_TYPE": "v3-8"}, accel_glob="/nonexistent*")
        True
    """
    env = os.environ if environ is None else environ
    if env.get("PJRT_DEVICE", "").upper() == "TPU" or any(env.get(name) for name in _TPU_VARIABLES):
        return True
    return bool(_chips(accel_glob))


def _chips(accel_glob: str) -> tuple[str, ...]:
    """The device files matching ``accel_glob``; this host's own are listed once per process (a
    launch asks at every start, and listing /dev is most of a launch's planning time)."""
    return _host_chips() if accel_glob == _ACCEL else tuple(glob.glob(accel_glob))


@functools.cache
def _host_chips() -> tuple[str, ...]:
    return tuple(glob.glob(_ACCEL))


def xla_device_count(environ: Mapping[str, str] | None = None, accel_glob: str = _ACCEL) -> int:
    """XLA devices torch_xla would see: ``CPU_NUM_DEVICES`` on its CPU device, else the TPU cores (≥ 1).

    Examples:
        >>> xla_device_count({"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "4"})
        4
    """
    env = os.environ if environ is None else environ
    if xla_platform(env, accel_glob) == "CPU":
        return max(1, int(env.get("CPU_NUM_DEVICES", "1")))
    cores, _ = tpu_cores(env, accel_glob)
    return max(cores, 1)


def tpu_chips(pci_root: str = _PCI, vfio_root: str = _VFIO) -> int:
    """TPU chips this host hands to processes as torch_tpu finds them: Google's PCI devices that are
    exposed through VFIO (a device file in ``/dev/vfio`` for their IOMMU group). Other Google PCI
    devices (the gVNIC network card) have no VFIO group and are not counted. Reads files only.

    Examples:
        >>> tpu_chips(pci_root="/nonexistent", vfio_root="/nonexistent")
        0
    """
    count = 0
    try:
        devices = sorted(os.listdir(pci_root))
    except OSError:
        return 0
    for name in devices:
        device = os.path.join(pci_root, name)
        try:
            with open(os.path.join(device, "vendor")) as vendor:
                if vendor.read().strip() != _GOOGLE_PCI_VENDOR:
                    continue
            group = os.path.basename(os.readlink(os.path.join(device, "iommu_group")))
        except OSError:
            continue
        if os.path.exists(os.path.join(vfio_root, group)):
            count += 1
    return count


def torch_tpu_installed() -> bool:
    """Whether torch_tpu (the successor of torch_xla) is installed, without importing it.

    Examples:
        >>> isinstance(torch_tpu_installed(), bool)
        True
    """
    return "torch_tpu" in sys.modules or importlib.util.find_spec("torch_tpu") is not None
