"""The machine a GPU pass ran on, as one JSON line: Python, torch and its CUDA, the GPUs (from
nvidia-smi, so this process never initialises CUDA), the versions of the packages the pass uses,
and what a forked child's CUDA does after the parent counted GPUs through the CUDA driver
(``torch.cuda.is_available()`` without NVML) and through NVML: the premise of the launcher's
driver check (backends/local/preflight.py), seen on a real driver.

Run: python bench/gpu/facts.py
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from importlib import metadata

PACKAGES = (
    "torch",
    "accelerate",
    "transformers",
    "deepspeed",
    "ipykernel",
    "ipywidgets",
    "jupyter_client",
    "nbclient",
    "cloudpickle",
    "psutil",
    "pytest",
)


def gpus() -> list[dict]:
    """Each GPU's index, name, memory (MiB), compute capability and driver, from nvidia-smi."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    fields = "index,name,memory.total,compute_cap,driver_version"
    out = subprocess.run(
        [smi, f"--query-gpu={fields}", "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30
    )
    rows = [[part.strip() for part in line.split(",")] for line in out.stdout.strip().splitlines()]
    return [dict(zip(fields.split(","), row, strict=False)) for row in rows if len(row) == 5]


FORK_PROBE = r"""
import json, os, sys, torch
from notebook_launcher.devices.probe import cuda_driver_started
os.environ.pop("PYTORCH_NVML_BASED_CUDA_CHECK")  # importing notebook_launcher set it
if sys.argv[1] == "nvml":
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
found = {"driver_started_after_import": cuda_driver_started()}
counted = torch.cuda.is_available()
found["driver_started_after_counting"] = cuda_driver_started()
found["cuda_initialized"] = torch.cuda.is_initialized()
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    try:
        message = f"ok {torch.ones(1, device='cuda').item()}"
    except Exception as err:
        message = f"{type(err).__name__}: {err}"
    os.write(write, message.encode()[:500])
    os._exit(0)
os.close(write)
os.waitpid(pid, 0)
found["forked_child_cuda"] = os.read(read, 1000).decode()
print(json.dumps(found))
"""


def fork_probe(how: str) -> dict | str:
    """Count GPUs ``how`` ("is_available" without NVML, or "nvml"), then use CUDA in a forked child."""
    out = subprocess.run([sys.executable, "-c", FORK_PROBE, how], capture_output=True, text=True, timeout=120)
    lines = out.stdout.strip().splitlines()
    return json.loads(lines[-1]) if out.returncode == 0 and lines else out.stderr[-1000:]


def versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def main() -> None:
    import torch

    facts = {
        "python": platform.python_version(),
        "executable": sys.executable,
        "cpus": os.cpu_count(),
        "torch_cuda": torch.version.cuda,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())) if torch.version.cuda else None,
        "gpus": gpus(),
        "packages": versions(),
    }
    if facts["gpus"]:
        facts["fork_after_is_available"] = fork_probe("is_available")
        facts["fork_after_nvml_count"] = fork_probe("nvml")
    print(json.dumps(facts))


if __name__ == "__main__":
    main()
