"""notebook-launcher: run multi-process PyTorch training from a live Jupyter kernel.

Example:
    >>> from notebook_launcher import notebook_launcher
    >>> state = notebook_launcher(train, args=(3, 1e-3), num_processes=2)

Importing the package never initializes CUDA: it makes torch count GPUs through NVML and starts
recording where CUDA gets initialized, so a fork that cannot work can name the cell that did it.
"""

import os

os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")

import importlib  # noqa: E402

from . import cuda_init_site  # noqa: E402

cuda_init_site.install_when_imported()

# Public names load on first use, so a spawned rank (which imports only the worker) starts fast.
_PUBLIC = {
    "notebook_launcher": "api",
    "launch": "api",
    "Launch": "handle",
    "active_launches": "handle",
    "LaunchError": "errors",
    "WorkerError": "errors",
    "WorkerTraceback": "errors",
}


def __getattr__(name):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'notebook_launcher' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_PUBLIC[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + list(_PUBLIC))

__all__ = [
    "notebook_launcher",
    "launch",
    "Launch",
    "LaunchError",
    "WorkerError",
    "WorkerTraceback",
    "active_launches",
]
