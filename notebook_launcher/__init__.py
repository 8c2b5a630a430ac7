"""notebook-launcher: run multi-process PyTorch training from a live Jupyter kernel.

Examples:
    >>> from notebook_launcher import notebook_launcher
    >>> def train(epochs, lr):
    ...     return {"epochs": epochs, "lr": lr}
    >>> notebook_launcher(train, args=(3, 1e-3), num_processes=2)   # rank 0's return value
    {'epochs': 3, 'lr': 0.001}

Importing the package never initializes CUDA: it makes torch count GPUs through NVML and starts
recording where CUDA gets initialized, so a fork that cannot work can name the cell that did it.
"""

import importlib

from . import nvml_check  # noqa: F401  (first: sets the NVML check before anything could import torch)
from ._version import __version__
from .devices import cuda_init_site

cuda_init_site.install_when_imported()

# Public names load on first use, so a spawned rank (which imports only the worker) starts fast.
_PUBLIC = {
    "notebook_launcher": "api",
    "launch": "api",
    "Launch": "launching.handle",
    "active_launches": "launching.handle",
    "last_launch": "launching.handle",
    "LaunchError": "errors",
    "WorkerError": "errors",
    "WorkerTraceback": "errors",
    "LaunchStalled": "errors",
    "LaunchTimeout": "errors",
    "kernel_settings": "frontend.settings",
    "set_defaults": "frontend.settings",
    "device_picker": "frontend.picker",
    "start_workers": "workers",
    "Workers": "workers",
    "attach": "detached",
    "detached_launches": "detached",
    "DetachedLaunch": "detached",
}


def __getattr__(name):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'notebook_launcher' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_PUBLIC[name]}", __name__), name)
    globals()[name] = value
    return value


def _jupyter_labextension_paths():
    """Where JupyterLab finds the prebuilt sidebar extension (``jupyter labextension develop``)."""
    return [{"src": "labextension", "dest": "notebook-launcher"}]


def _jupyter_server_extension_points():
    """The Jupyter server extension that keeps each launch's static form in saved notebooks."""
    return [{"module": "notebook_launcher.frontend.server_extension"}]


def load_ipython_extension(ipython):
    """``%load_ext notebook_launcher``: register the sidebar's comm target and the ``%dist`` /
    ``%%dist`` magics in this kernel."""
    from .frontend.sidebar_comm import register
    from .workers.magics import register as register_magics

    register(ipython)
    register_magics(ipython)


_registered = False


def _register_in_kernel():
    """Importing the package inside a Jupyter kernel makes the sidebar work without %load_ext, and
    lets each backend prepare the kernel (the local one warms the imports its ranks would otherwise each do). Once."""
    import sys

    global _registered
    if _registered:
        return
    _registered = True
    ipython = sys.modules.get("IPython")
    if ipython is not None and getattr(ipython.get_ipython(), "kernel", None) is not None:
        load_ipython_extension(ipython.get_ipython())
        from .backends import loaded_backends, optional
        from .frontend.notices import register as register_notices
        from .frontend.subshell_noise import route_subshell_noise

        register_notices(ipython.get_ipython())
        route_subshell_noise()
        for backend in loaded_backends():
            optional(backend, "in_kernel")()
        from .rank.containers import sweep as sweep_dead_cgroups
        from .scratch import pid_alive, sweep_dead_kernels

        sweep_dead_kernels()  # what kernels killed before they could clean up left in /tmp
        sweep_dead_cgroups(pid_alive)  # and in the cgroups of their ranks


_register_in_kernel()


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
    "last_launch",
    "kernel_settings",
    "set_defaults",
    "device_picker",
    "start_workers",
    "Workers",
    "LaunchStalled",
    "LaunchTimeout",
    "attach",
    "detached_launches",
    "DetachedLaunch",
    "__version__",
]
