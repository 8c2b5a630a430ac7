"""The two calls users make: ``notebook_launcher`` (blocks, returns rank 0's value) and ``launch``."""

from __future__ import annotations

import sys

from .frontend.picker import device_picker
from .frontend.settings import kernel_settings, set_defaults
from .frontend.views import select_view
from .launching.handle import Launch, last_launch
from .launching.plan import make_plan
from .starters import select_starter

__all__ = ["notebook_launcher", "launch"]


def launch(
    function,
    args=(),
    num_processes=None,
    *,
    device="auto",
    start_method=None,
    mixed_precision=None,
    use_port=None,
    master_addr="127.0.0.1",
    node_rank=0,
    num_nodes=1,
    display="auto",
    grace_period=2.0,
):
    """Start ``function(*args)`` on ``num_processes`` ranks and return a ``Launch`` handle at once.

    Args:
        function: the training function; defined in a notebook cell is fine.
        args: positional arguments for it (a tuple or list).
        num_processes: ranks on this machine; None = the kernel's choice (the JupyterLab sidebar or
            ``kernel_settings()``), else one per GPU on a GPU machine, 1 on CPU.
        device: "auto" (CUDA when a GPU is present, else CPU), "cpu" or "cuda".
        start_method: "auto" (fork when the kernel is fork-safe, else spawn with a notice), "fork",
            "spawn"; None = the kernel's choice (default "auto").
        mixed_precision: "no", "fp16" or "bf16": the default of every Accelerator in the ranks;
            None = the kernel's choice (default "no").
        use_port: the rendezvous port; None picks a free one for every launch.
        master_addr, node_rank, num_nodes: where rank 0 listens, and this node's place (multi-node).
        display: "auto" (the live widget in a Jupyter kernel, else text), "widget", "text"
            (``[rank N]`` lines) or "none".
        grace_period: seconds between SIGTERM and SIGKILL when ranks are ended.

    Returns:
        a running ``Launch``: ``.wait()``, ``.stop()``, ``.status``, ``.results``, ``.logs(rank)``.

    Raises (before anything starts):
        TypeError, ValueError: bad arguments; LaunchError: fork unsafe, unpicklable argument, port in use.

    Example:
        >>> def train(epochs, lr):
        ...     return epochs * lr
        >>> job = launch(train, args=(3, 0.5), num_processes=2, display="none")   # returns at once
        >>> job.wait()
        1.5
    """
    view = select_view(display)
    defaults = kernel_settings()
    plan, notices = make_plan(
        function,
        args,
        num_processes,
        device=device,
        start_method=defaults.start_method if start_method is None else start_method,
        mixed_precision=defaults.mixed_precision if mixed_precision is None else mixed_precision,
        use_port=use_port,
        master_addr=master_addr,
        node_rank=node_rank,
        num_nodes=num_nodes,
        grace_period=grace_period,
        default_num_processes=defaults.num_processes,
    )
    for notice in notices:
        print(notice, file=sys.stderr)
    starter = select_starter(plan.start_method)
    starter.prepare(plan)
    return Launch(plan, starter, view).start()


def notebook_launcher(function, args=(), num_processes=None, **options):
    """Run ``function(*args)`` on ``num_processes`` ranks and return rank 0's return value.

    Takes the same arguments as ``launch``. Each rank's output appears in the cell as it is written,
    prefixed with ``[rank N]``. If a rank raises, its exception is raised here as the same type
    (message prefixed with the rank, the rank's traceback as the cause) and the other ranks are ended.
    Interrupting the kernel ends every rank. Calling it again afterwards just works.

    Example:
        >>> def train(epochs):
        ...     import torch.distributed as dist
        ...     dist.init_process_group("gloo")
        ...     return dist.get_rank() * epochs
        >>> notebook_launcher(train, args=(3,), num_processes=2)
        0
    """
    __tracebackhide__ = True  # IPython folds this frame: the cell shows the rank's frames
    return launch(function, args, num_processes, **options).wait()


# The README's own import is `from notebook_launcher import notebook_launcher`, after which the name
# is this function, not the package: the package's other calls are reachable from it as well.
for _name, _value in (
    ("launch", launch),
    ("last_launch", last_launch),
    ("set_defaults", set_defaults),
    ("kernel_settings", kernel_settings),
    ("device_picker", device_picker),
):
    setattr(notebook_launcher, _name, _value)
