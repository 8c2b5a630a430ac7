"""What this kernel can run on — CPUs, CUDA GPUs (name, memory), TPU cores — found without
initializing CUDA or the XLA runtime (the kernel must stay fork-safe).

GPU names and memory come from ``nvidia-smi`` (a separate process), the count that launches use
from NVML through torch; TPU cores from the TPU VM's environment and ``/dev/accel*`` devices.

Example:
    >>> parse_nvidia_smi("0, Tesla T4, 15360\\n1, Tesla T4, 15360\\n")[1]
    {'index': 1, 'name': 'Tesla T4', 'memory_mib': 15360}
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess

from . import select_device
from .cpu import usable_cpus

__all__ = ["device_inventory", "parse_nvidia_smi", "tpu_cores", "is_tpu_host"]

_TPU_VARIABLES = ("TPU_ACCELERATOR_TYPE", "TPU_NAME", "ISTPUVM", "COLAB_TPU_ADDR", "TPU_WORKER_ID")


def parse_nvidia_smi(text):
    gpus = []
    for line in text.strip().splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) == 3 and parts[0].isdigit():
            memory = int(parts[2]) if parts[2].isdigit() else None
            gpus.append({"index": int(parts[0]), "name": parts[1], "memory_mib": memory})
    return gpus


def cuda_gpus():
    """Visible GPUs with names and memory; [] without a GPU or nvidia-smi."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, "--query-gpu=index,name,memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = parse_nvidia_smi(out)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and all(part.strip().isdigit() for part in visible.split(",") if part.strip()):
        wanted = [int(part) for part in visible.split(",") if part.strip()]
        gpus = [gpu for index in wanted for gpu in gpus if gpu["index"] == index]
    return gpus


def tpu_cores(environ=None, accel_glob="/dev/accel*"):
    """TPU cores on this host: from ``TPU_ACCELERATOR_TYPE`` (e.g. "v2-8" → 8) or /dev/accel devices."""
    env = os.environ if environ is None else environ
    kind = env.get("TPU_ACCELERATOR_TYPE", "")
    match = re.fullmatch(r"v\d+[a-z]*-(\d+)", kind)
    if match:
        return int(match.group(1)), kind
    chips = len(glob.glob(accel_glob))
    return chips, kind or None


def is_tpu_host(environ=None, accel_glob="/dev/accel*"):
    """A TPU VM (Colab, Kaggle, Cloud): PJRT_DEVICE=TPU, a TPU variable, or TPU chips in /dev.

    Looks at the host only; the XLA runtime is not touched.

    Example:
        >>> is_tpu_host({"TPU_ACCELERATOR_TYPE": "v3-8"}, accel_glob="/nonexistent*")
        True
        >>> is_tpu_host({"PJRT_DEVICE": "CPU"}, accel_glob="/nonexistent*")
        False
    """
    env = os.environ if environ is None else environ
    if env.get("PJRT_DEVICE", "").upper() == "TPU" or any(env.get(name) for name in _TPU_VARIABLES):
        return True
    return bool(glob.glob(accel_glob))


def device_inventory():
    """Everything the sidebar shows, as builtins (sent over the comm)."""
    device = select_device("auto")
    cores, tpu_type = tpu_cores()
    return {
        "cpu": {"count": usable_cpus()},
        "cuda": cuda_gpus(),
        "tpu": {"cores": cores, "type": tpu_type},
        "device": device.name,
        "max_processes": device.count(),
        "default_processes": device.default_processes(),
    }
