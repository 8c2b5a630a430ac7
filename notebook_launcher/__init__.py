"""notebook-launcher: run multi-process PyTorch training from a live Jupyter kernel.

Example:
    >>> from notebook_launcher import notebook_launcher
    >>> state = notebook_launcher(train, args=(3, 1e-3), num_processes=2)

Importing the package never initializes CUDA: it makes torch count GPUs through NVML and starts
recording where CUDA gets initialized, so a fork that cannot work can name the cell that did it.
"""

import os

os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")

from . import cuda_init_site  # noqa: E402
from .api import launch, notebook_launcher  # noqa: E402
from .errors import LaunchError, WorkerError, WorkerTraceback  # noqa: E402
from .launch import Launch, active_launches  # noqa: E402

cuda_init_site.install_when_imported()

__all__ = [
    "notebook_launcher",
    "launch",
    "Launch",
    "LaunchError",
    "WorkerError",
    "WorkerTraceback",
    "active_launches",
]
