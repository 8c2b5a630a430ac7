"""The two calls users make: ``notebook_launcher`` (blocks, returns rank 0's value) and ``launch``."""

from __future__ import annotations

import contextvars
import sys
from collections.abc import Callable, Sequence
from typing import Any

from .backends import get_backend
from .backends.base import Starter
from .backends.plans import LaunchPlan
from .choices import STRAGGLER_TIMEOUT
from .frontend.picker import device_picker
from .frontend.settings import kernel_settings, set_defaults
from .frontend.views import select_view
from .launching.handle import Launch, last_launch
from .launching.listener import LaunchListener
from .launching.plan import make_plan

__all__ = ["notebook_launcher", "launch", "plan_launch", "start_launch"]

# Set while ``notebook_launcher`` starts its launch: the cell waits for it, so nothing the cell does
# can come between the start and the launch's output, which may then appear only once there is
# something to show (see ``WidgetView``).
_CALLER_WAITS: contextvars.ContextVar[bool] = contextvars.ContextVar("notebook_launcher_caller_waits", default=False)


def launch(
    function: Callable[..., Any],
    args: tuple | list = (),
    num_processes: int | None = None,
    mixed_precision: str | None = None,
    use_port: int | str | None = None,
    master_addr: str = "127.0.0.1",
    node_rank: int = 0,
    num_nodes: int = 1,
    rdzv_backend: str = "static",
    rdzv_endpoint: str = "",
    rdzv_conf: dict | None = None,
    rdzv_id: str = "none",
    max_restarts: int = 0,
    monitor_interval: float = 0.1,
    log_line_prefix_template: str | None = None,
    *,
    device: str = "auto",
    start_method: str | None = None,
    display: str = "auto",
    grace_period: float = 2.0,
    stall_timeout: float | None = None,
    straggler_timeout: float | None = STRAGGLER_TIMEOUT,
    timeout: float | None = None,
    rendezvous_timeout: float = 300.0,
    secret: str | None = None,
    cluster: str | None = None,
    listeners: Sequence[Any] = (),
    detach: bool = False,
    **backend_options: Any,
) -> Launch:
    """Start ``function(*args)`` on ``num_processes`` ranks and return a ``Launch`` handle at once.

    The arguments up to ``log_line_prefix_template`` are Hugging Face Accelerate's
    ``notebook_launcher``'s, in its order and with its meaning, so a notebook written for it runs
    with one import changed.

    Args:
        function: the training function; defined in a notebook cell is fine.
        args: positional arguments for it (a tuple or list).
        num_processes: ranks on this machine; None = the kernel's choice (the JupyterLab sidebar or
            ``set_defaults``), else one per GPU on a GPU machine, 1 on CPU.
        mixed_precision: "no", "fp16" or "bf16": the default of every Accelerator in the ranks;
            None = the kernel's choice (default "no").
        use_port: the port of the ranks' rendezvous store (int or digit string); None picks a free
            one for every attempt. Required with several nodes.
        master_addr: where node 0 hosts the store (bound to this address only).
        node_rank: this node's place among the nodes (0 hosts the store).
        num_nodes: how many nodes (machines) take part.
        rdzv_backend: "static" (node ranks as given) or "c10d" (torch's dynamic rendezvous numbers them).
        rdzv_endpoint: c10d: ``host:port`` of its store (default ``master_addr:use_port``).
        rdzv_conf: rendezvous settings (``join_timeout`` sets ``rendezvous_timeout``).
        rdzv_id: the run's id (``TORCHELASTIC_RUN_ID``); the nodes of one run must share it (c10d
            admits only nodes with the same id). "none" is kept with several nodes, as torchrun
            does, and replaced by a fresh id on one node.
        max_restarts: when a rank fails, end and start the whole group again up to this many times
            (fresh port, same arguments; ranks see ``TORCHELASTIC_RESTART_COUNT``).
        monitor_interval: seconds between looks at the other nodes' health.
        log_line_prefix_template: the prefix of each line printed as text, e.g. ``"[{rank}]: "``
            (``{rank}``, ``{local_rank}``, ``{role_name}``); default ``"[rank {rank}] "``.
        device: "auto" (the TPU on a TPU host, CUDA when a GPU is present, else CPU), "cpu", "cuda",
            "tpu" (torch_tpu's chips, one spawned rank per chip, where torch_tpu is installed; else
            torch_xla's), "xla" (torch_xla's, started by ``xmp.spawn``).
        start_method: "auto" (fork when the kernel is fork-safe, else spawn with a notice), "fork",
            "spawn"; None = the kernel's choice (default "auto").
        display: "auto" (the launch's output with a live widget in a Jupyter kernel, else text),
            "widget", "text" (``[rank N]`` lines) or "none".
        grace_period: seconds between SIGTERM and SIGKILL when ranks are ended.
        stall_timeout: end the launch with ``LaunchStalled`` (and every live rank's stack) when no
            rank shows a sign of life for this many seconds, or ranks are still busy this long
            after another returned; None (the default) never.
        straggler_timeout: end the launch the same way when, after a rank returned, the others show
            no sign of life for this many seconds (default 300: a rank left in a collective by a
            peer that returned would otherwise wait for ever); None waits for ever.
        timeout: end the launch with ``LaunchTimeout`` (and the stacks) after this many seconds.
        rendezvous_timeout: seconds to wait for every node (and, on other nodes, for node 0's store).
        secret: with several nodes, a key every node's cell shares (or ``NOTEBOOK_LAUNCHER_SECRET``):
            the nodes sign their messages on the rendezvous store with it, so another process that
            reaches the store's port cannot forge a node's join or failure. Not needed on one node.
        cluster: where the ranks run (``backends``): None (this machine), "ray" (one Ray actor per
            rank on the cluster ``ray.init()`` finds: ``RAY_ADDRESS`` or a running head) or
            "ray://host:10001" (Ray Client). ``num_processes`` is then the total number of ranks;
            rank 0's node hosts the store; the function travels by value. Needs
            ``pip install 'notebook-launcher[ray]'``.
        listeners: objects told of the launch's events as they happen, each a typed event: any of
            ``on_start(launch)``, ``on_status(event)`` (``.rank``, ``.status``), ``on_output(event)``
            (``.rank``, ``.stream``, ``.text``), ``on_live``, ``on_display``, ``on_metric(event)``
            (``.rank``, ``.step``, ``.values``), ``on_finish(launch)``, or one ``on_event(event)``
            for all of them (see ``launching.listener``); one that raises is reported and dropped.
            ``Launch.subscribe`` adds one later.
        detach: run the ranks and their supervision in a process of their own that outlives this
            kernel (a restart, a crash, Colab recycling the runtime): what they say is kept in
            ``.notebook-launcher/detached/<id>/`` of the working folder, and a later kernel follows
            the launch with ``attach()`` (its whole log so far, ``wait()``, ``stop()``). Returns a
            ``DetachedLaunch``; an interrupt of a cell waiting on it leaves it running. One node,
            this machine. Default False: nothing outlives the kernel.
        backend_options: the chosen backend's own keywords, checked by it. Ray's are
            ``resources_per_rank`` (what each rank's actor reserves, e.g. ``{"GPU": 1}``; default
            ``{"CPU": 1}``) and ``placement_strategy`` ("PACK", "SPREAD", "STRICT_PACK",
            "STRICT_SPREAD"): see ``backends.ray.options.check_cluster``.

    Returns:
        The running ``Launch``: ``.wait()``, ``.stop()``, ``.stacks()``, ``.status``, ``.results``, ``.logs(rank)``.

    Raises:
        TypeError: a bad argument type, before anything starts.
        ValueError: a bad argument value (the valid ones are listed), before anything starts.
        LaunchError: the kernel cannot fork, or an argument cannot be pickled for spawn.

    Examples:
        >>> def train(epochs, lr):
        ...     return epochs * lr
        >>> job = launch(train, args=(3, 0.5), num_processes=2, display="none")   # returns at once
        >>> job.wait()
        1.5
    """
    plan, notices = plan_launch(
        function,
        args,
        num_processes,
        mixed_precision=mixed_precision,
        use_port=use_port,
        master_addr=master_addr,
        node_rank=node_rank,
        num_nodes=num_nodes,
        rdzv_backend=rdzv_backend,
        rdzv_endpoint=rdzv_endpoint,
        rdzv_conf=rdzv_conf,
        rdzv_id=rdzv_id,
        max_restarts=max_restarts,
        monitor_interval=monitor_interval,
        log_line_prefix_template=log_line_prefix_template,
        device=device,
        start_method=start_method,
        grace_period=grace_period,
        stall_timeout=stall_timeout,
        straggler_timeout=straggler_timeout,
        timeout=timeout,
        rendezvous_timeout=rendezvous_timeout,
        secret=secret,
        cluster=cluster,
        **backend_options,
    )
    view = select_view(display, line_prefix=plan.log_line_prefix, show_at_start=not _CALLER_WAITS.get())
    if detach:
        if listeners:
            raise ValueError("detach=True takes no listeners: they would live in a kernel that may go away")
        from .detached import start_detached

        return start_detached(plan, notices, view)  # type: ignore[return-value]  # Launch's read side
    return start_launch(plan, notices, view, listeners)


def plan_launch(
    function: Callable[..., Any],
    args: tuple | list,
    num_processes: int | None,
    *,
    mixed_precision: str | None = None,
    start_method: str | None = None,
    **options: Any,
) -> tuple[LaunchPlan, list[str]]:
    """The checked ``LaunchPlan`` of a launch, with the kernel's defaults filled in, and its notices.

    ``options`` are ``launch``'s other keyword arguments, except ``display``. For code that starts
    ranks its own way (``workers``); raises as ``launch`` does.

    Examples:
        >>> plan, notices = plan_launch(print, (), 2, device="cpu")
        >>> plan.num_processes, plan.device.name
        (2, 'cpu')
    """
    defaults = kernel_settings()
    return make_plan(
        function,
        args,
        num_processes,
        start_method=defaults.start_method if start_method is None else start_method,
        mixed_precision=defaults.mixed_precision if mixed_precision is None else mixed_precision,
        default_num_processes=defaults.num_processes,
        **options,
    )


def start_launch(
    plan: LaunchPlan,
    notices: Sequence[str],
    view: LaunchListener,
    listeners: Sequence[Any] = (),
    kind: str = "launch",
) -> Launch:
    """Print ``notices``, start ``plan``'s ranks shown by ``view`` (and told to ``listeners``) and
    return the running ``Launch`` (of ``kind``: "launch", or "workers")."""
    for notice in notices:
        print(notice, file=sys.stderr)

    backend = get_backend(plan.backend)

    def make_starter() -> Starter:
        starter = backend.starter(plan)
        starter.prepare(plan)
        return starter

    return Launch(plan, make_starter(), view, make_starter, listeners, kind).start()


def notebook_launcher(
    function: Callable[..., Any], args: tuple | list = (), num_processes: int | None = None, **options: Any
) -> Any:
    """Run ``function(*args)`` on ``num_processes`` ranks and return rank 0's return value.

    Takes the same arguments as ``launch``. Each rank's output appears in the cell as it is written,
    prefixed with ``[rank N]``. If a rank raises, its exception is raised here as the same type
    (message prefixed with the rank, the rank's traceback as the cause) and the other ranks are ended.
    Interrupting the kernel ends every rank. Calling it again afterwards just works.

    Examples:
        >>> def train(epochs):
        ...     import torch.distributed as dist
        ...     dist.init_process_group("gloo")
        ...     return dist.get_rank() * epochs
        >>> notebook_launcher(train, args=(3,), num_processes=2)
        0
    """
    __tracebackhide__ = True  # IPython folds this frame: the cell shows the rank's frames
    waits = _CALLER_WAITS.set(True)
    try:
        job = launch(function, args, num_processes, **options)
    finally:
        _CALLER_WAITS.reset(waits)
    return job.wait()


# The README's own import is `from notebook_launcher import notebook_launcher`, after which the name
# is this function, not the package: the package's other calls are reachable from it as well.
from .detached import attach, detached_launches  # noqa: E402  (after launch: it starts detached launches)

for _name, _value in (
    ("launch", launch),
    ("attach", attach),
    ("detached_launches", detached_launches),
    ("last_launch", last_launch),
    ("set_defaults", set_defaults),
    ("kernel_settings", kernel_settings),
    ("device_picker", device_picker),
):
    setattr(notebook_launcher, _name, _value)
