"""Turn the user's arguments into a checked ``LaunchPlan`` before any process starts.

Every check is a small function whose message says what was wrong and what to do. Nothing here
starts a process or touches a device; the start method is resolved last, from the fork preflight.

Example:
    >>> plan, notices = make_plan(print, ("hi",), 1, start_method="spawn")
    >>> plan.num_processes, plan.start_method, plan.world_size, notices
    (1, 'spawn', 1, [])
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..choices import MIXED_PRECISIONS, START_METHODS, check_choice
from ..devices import Device, select_device
from ..devices.probe import usable_cpus
from .environment import rank_environment, threads_per_rank
from .ports import check_port_free, free_port
from .preflight import fork_hazards

__all__ = ["LaunchPlan", "make_plan"]


@dataclass(frozen=True)
class LaunchPlan:
    """Everything a launch needs, checked. ``num_processes`` counts the ranks on this node."""

    function: Callable
    args: tuple
    num_processes: int
    device: Device
    start_method: str
    mixed_precision: str
    master_addr: str
    master_port: int
    node_rank: int
    num_nodes: int
    grace_period: float

    @property
    def world_size(self):
        return self.num_nodes * self.num_processes

    def global_rank(self, local_rank):
        return self.node_rank * self.num_processes + local_rank

    @property
    def threads(self):
        """Intra-op threads per rank: this machine's usable cores shared out among the local ranks."""
        return threads_per_rank(usable_cpus(), self.num_processes)

    def environment(self, local_rank):
        """The environment of the rank with this local rank (see ``rank_environment``)."""
        return rank_environment(
            local_rank=local_rank,
            num_processes=self.num_processes,
            node_rank=self.node_rank,
            num_nodes=self.num_nodes,
            master_addr=self.master_addr,
            master_port=self.master_port,
            mixed_precision=self.mixed_precision,
            device=self.device,
            threads=self.threads,
        )


def make_plan(
    function,
    args=(),
    num_processes=None,
    *,
    device="auto",
    start_method="auto",
    mixed_precision="no",
    use_port=None,
    master_addr="127.0.0.1",
    node_rank=0,
    num_nodes=1,
    grace_period=2.0,
    default_num_processes=None,
):
    """Check the arguments and resolve the defaults.

    Returns:
        ``(plan, notices)``: one-line messages for the user (CPU ranks oversubscribed, "auto" chose
        spawn), usually none.

    Raises:
        TypeError: ``function`` is not callable or ``args`` is not a tuple or list.
        ValueError: a bad count, choice, rank or port.
        LaunchError: ``start_method="fork"`` when the kernel cannot be forked, or a fixed port in use.
    """
    check_function(function, args)
    check_choice("mixed_precision", mixed_precision, MIXED_PRECISIONS)
    check_choice("start_method", start_method, START_METHODS)
    use_port = check_port_number(use_port)
    check_nodes(num_nodes, node_rank, use_port)
    check_grace(grace_period)
    chosen = select_device(device)
    count = resolve_num_processes(num_processes, chosen, default_num_processes)
    port = resolve_port(use_port, master_addr, node_rank)
    method, notice = chosen.resolve_start_method(start_method, fork_hazards())
    notices = [text for text in (chosen.oversubscription(count), notice) if text]
    plan = LaunchPlan(
        function,
        tuple(args),
        count,
        chosen,
        method,
        mixed_precision,
        master_addr,
        port,
        node_rank,
        num_nodes,
        float(grace_period),
    )
    return plan, notices


def check_function(function, args):
    if not callable(function):
        raise TypeError(f"function must be callable, got {type(function).__name__}: {function!r}")
    if not isinstance(args, (tuple, list)):
        raise TypeError(
            f"args must be a tuple or list of positional arguments, got {type(args).__name__}"
            f" (for one argument write args=({args!r},))"
        )


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def check_port_number(use_port):
    """None or a port number; digit strings (Accelerate's ``use_port="29500"`` style) become ints."""
    port = int(use_port) if isinstance(use_port, str) and use_port.isdigit() else use_port
    if port is not None and (not _is_int(port) or not 0 < port < 65536):
        raise ValueError(f"use_port must be None or a port number in 1..65535, got {use_port!r}")
    return port


def check_nodes(num_nodes, node_rank, use_port):
    if not _is_int(num_nodes) or num_nodes < 1:
        raise ValueError(f"num_nodes must be a positive int, got {num_nodes!r}")
    if not _is_int(node_rank) or not 0 <= node_rank < num_nodes:
        raise ValueError(f"node_rank must be an int in [0, {num_nodes}), got {node_rank!r}")
    if num_nodes > 1 and use_port is None:
        raise ValueError("with num_nodes > 1 every node must agree on the port: pass use_port= (and master_addr=)")


def check_grace(grace_period):
    if isinstance(grace_period, bool) or not isinstance(grace_period, (int, float)) or grace_period < 0:
        raise ValueError(f"grace_period must be a number of seconds >= 0, got {grace_period!r}")


def resolve_num_processes(num_processes, device, default=None):
    """The argument if given, else the kernel's chosen default, else the device's own default."""
    if num_processes is None:
        num_processes = default if default is not None else device.default_processes()
    if not _is_int(num_processes):
        raise ValueError(
            f"num_processes must be an int, got {type(num_processes).__name__} {num_processes!r}"
            f" (found {device.describe()})"
        )
    if num_processes < 1:
        raise ValueError(f"num_processes must be at least 1, got {num_processes} (found {device.describe()})")
    refused = device.check_processes(num_processes)
    if refused:
        raise ValueError(refused)
    return num_processes


def resolve_port(use_port, master_addr, node_rank):
    if use_port is None:
        return free_port(master_addr)
    if node_rank == 0:
        check_port_free(master_addr, use_port)
    return use_port
