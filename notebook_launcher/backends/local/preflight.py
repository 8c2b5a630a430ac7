"""Fork safety: is it safe to fork this kernel, and if not, what made it unsafe?

Each check looks at the *parent* (the kernel). ``torch.cuda._is_in_bad_fork()`` is only ever true in
a child, so it is not one of them; ``torch.cuda.is_initialized()`` is.

Examples:
    >>> fork_hazards()   # in a fresh kernel
    []
"""

from __future__ import annotations

import sys

from ...devices import cuda_init_site
from ...devices.probe import cuda_driver_started

__all__ = ["fork_hazards", "cuda_hazard", "cuda_driver_hazard", "process_group_hazard", "xla_hazard"]


def cuda_hazard() -> str | None:
    """CUDA initialized in the kernel: a forked child cannot use it ("Cannot re-initialize CUDA")."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    site = cuda_init_site.first_site()
    where = f" by {site}" if site else " (before notebook_launcher was imported, so the line is unknown)"
    return f"CUDA was initialized in this kernel{where}"


def cuda_driver_hazard() -> str | None:
    """The CUDA driver started in the kernel without CUDA being initialized there (what
    ``torch.cuda.is_available()`` does when it does not count through NVML, or a library that
    starts the driver itself): a forked child's CUDA then fails ("initialization error")."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.version.cuda or torch.cuda.is_initialized() or not cuda_driver_started():
        return None
    site = cuda_init_site.first_site("driver")
    where = (
        f" by {site}"
        if site
        else " (before notebook_launcher was imported: torch.cuda.is_available() does it unless"
        " PYTORCH_NVML_BASED_CUDA_CHECK=1, which importing notebook_launcher first sets)"
    )
    return f"the CUDA driver was started in this kernel{where}; forked ranks could not use CUDA"


def process_group_hazard() -> str | None:
    """A torch.distributed process group in the kernel would be copied, half-working, into each rank."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return "a torch.distributed process group is initialized in this kernel (call destroy_process_group() first)"


def xla_hazard() -> str | None:
    """The XLA runtime started in the kernel (an XLA device or tensor was made there): forks cannot use it."""
    torch_xla = sys.modules.get("torch_xla")
    runtime = getattr(torch_xla, "_XLAC", None)
    if runtime is None or not runtime._xla_runtime_is_initialized():
        return None
    return (
        "the XLA runtime was started in this kernel (an XLA device or tensor was created here); restart the"
        " kernel and create XLA devices only inside the launched function"
    )


_CHECKS = (cuda_hazard, cuda_driver_hazard, process_group_hazard, xla_hazard)


def fork_hazards() -> list[str]:
    """Every reason the kernel cannot be forked safely right now, as sentences; empty when safe."""
    return [reason for reason in (check() for check in _CHECKS) if reason]
