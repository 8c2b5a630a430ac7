"""Turn the user's arguments into a checked ``LaunchPlan`` before any process starts.

Every check is a small function whose message says what was wrong and what to do. Nothing here
starts a process or touches a device; the start method is resolved last, from the fork preflight.

Examples:
    >>> plan, notices = make_plan(print, ("hi",), 1, start_method="spawn")
    >>> plan.num_processes, plan.start_method, plan.world_size, notices
    (1, 'spawn', 1, [])
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

from ..backends import backend_for, check_backend_options
from ..backends.base import PlacementRequest
from ..backends.plans import FaultPolicy, LaunchPlan, RendezvousPlan
from ..choices import FLUSH_INTERVAL, MIXED_PRECISIONS, START_METHODS, STRAGGLER_TIMEOUT, check_choice
from .checks import (
    check_address,
    check_count,
    check_endpoint,
    check_flush_interval,
    check_function,
    check_nodes,
    check_port_number,
    check_prefix,
    check_rdzv_conf,
    check_seconds,
    check_secret,
    check_working_directory,
)
from .ports import check_port_free

__all__ = ["FaultPolicy", "LaunchPlan", "RendezvousPlan", "make_plan"]  # the plans: ``backends.plans``


RDZV_BACKENDS = ("static", "c10d")


def make_plan(
    function: Callable[..., Any],
    args: tuple | list = (),
    num_processes: int | None = None,
    *,
    device: str = "auto",
    start_method: str = "auto",
    mixed_precision: str = "no",
    use_port: int | str | None = None,
    master_addr: str = "127.0.0.1",
    node_rank: int = 0,
    num_nodes: int = 1,
    grace_period: float = 2.0,
    default_num_processes: int | None = None,
    rdzv_backend: str = "static",
    rdzv_endpoint: str = "",
    rdzv_conf: dict | None = None,
    rdzv_id: str = "none",
    rendezvous_timeout: float = 300.0,
    max_restarts: int = 0,
    monitor_interval: float = 0.1,
    stall_timeout: float | None = None,
    straggler_timeout: float | None = STRAGGLER_TIMEOUT,
    timeout: float | None = None,
    log_line_prefix_template: str | None = None,
    secret: str | bytes | None = None,
    cluster: str | None = None,
    **backend_options: Any,
) -> tuple[LaunchPlan, list[str]]:
    """Check the arguments and resolve the defaults.

    ``cluster`` names the backend (``backends.backend_for``: None is this machine) and
    ``backend_options`` are its own keywords (Ray's ``resources_per_rank``, ``placement_strategy``),
    which it checks and uses to place the ranks (``Backend.place``).

    Returns:
        ``(plan, notices)``: one-line messages for the user (CPU ranks oversubscribed, "auto" chose
        spawn), usually none.

    Raises:
        TypeError: ``function`` is not callable or ``args`` is not a tuple or list.
        ValueError: a bad count, choice, rank, port or time.
        LaunchError: ``start_method="fork"`` when the kernel cannot be forked.
        FileNotFoundError: the kernel's working directory was deleted.
    """
    check_function(function, args)
    check_working_directory()
    mixed_precision = mixed_precision.lower() if isinstance(mixed_precision, str) else mixed_precision
    check_choice("mixed_precision", mixed_precision, MIXED_PRECISIONS)
    check_choice("start_method", start_method, START_METHODS)
    check_choice("rdzv_backend", rdzv_backend, RDZV_BACKENDS)
    port: int | None = check_port_number(use_port)
    check_address("master_addr", master_addr)
    flush_interval = check_flush_interval(FLUSH_INTERVAL)
    check_nodes(num_nodes, node_rank, port, rdzv_backend, rdzv_endpoint)
    faults = FaultPolicy(
        grace_period=check_seconds("grace_period", grace_period, zero_ok=True),
        max_restarts=check_count("max_restarts", max_restarts),
        stall_timeout=check_seconds("stall_timeout", stall_timeout, none_ok=True),
        straggler_timeout=check_seconds("straggler_timeout", straggler_timeout, none_ok=True),
        timeout=check_seconds("timeout", timeout, none_ok=True),
        monitor_interval=check_seconds("monitor_interval", monitor_interval),
    )
    conf = check_rdzv_conf(rdzv_conf)
    join_timeout = (
        check_seconds("rdzv_conf['join_timeout']", conf.pop("join_timeout"))
        if "join_timeout" in conf
        else check_seconds("rendezvous_timeout", rendezvous_timeout)
    )
    meeting = RendezvousPlan(
        rdzv_backend,
        port,
        check_endpoint(rdzv_endpoint),
        str(rdzv_id),
        conf,
        join_timeout,
        check_secret(secret, num_nodes),
    )
    check_prefix(log_line_prefix_template)
    if port is not None and node_rank == 0 and rdzv_backend == "static":
        check_port_free(master_addr, port)  # said now; the rendezvous binds it when the launch starts
    backend = backend_for(cluster)
    options = check_backend_options(backend, cluster, backend_options)
    request = PlacementRequest(num_processes, device, start_method, mixed_precision, num_nodes, default_num_processes)
    placement = backend.place(options, request)
    faults = dataclasses.replace(faults, stall_hint=placement.stall_hint)
    run_id = str(rdzv_id)
    if rdzv_id in (None, "none") and num_nodes == 1:
        run_id = os.urandom(6).hex()  # nodes share torchrun's default "none"; one node gets an id of its own
    plan = LaunchPlan(
        function,
        tuple(args),
        placement.num_processes,
        placement.device,
        placement.start_method,
        mixed_precision,
        master_addr,
        node_rank,
        num_nodes,
        meeting,
        faults,
        log_line_prefix_template,
        run_id,
        flush_interval,
        backend.name,
        options,
    )
    return plan, list(placement.notices)
