"""Turn the user's arguments into a checked ``LaunchPlan`` before any process starts.

Every check is a small function whose message says what was wrong and what to do. Nothing here
starts a process or touches a device; the start method is resolved last, from the fork preflight.

Examples:
    >>> plan, notices = make_plan(print, ("hi",), 1, start_method="spawn")
    >>> plan.num_processes, plan.start_method, plan.world_size, notices
    (1, 'spawn', 1, [])
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from ..choices import MIXED_PRECISIONS, START_METHODS, check_choice
from ..devices import Device, select_device
from ..devices.probe import usable_cpus
from .environment import rank_environment, threads_per_rank
from .ports import check_port_free
from .preflight import fork_hazards

__all__ = ["LaunchPlan", "make_plan"]


@dataclass(frozen=True)
class RendezvousPlan:
    """How the nodes (and the ranks' store) meet: see ``rendezvous``."""

    backend: str = "static"  # "static" or "c10d"
    port: int | None = None  # fixed; None picks a free one for every attempt
    endpoint: str = ""  # c10d: host:port of its store (default master_addr:port)
    run_id: str = "none"
    conf: dict = field(default_factory=dict)
    timeout: float = 300.0  # seconds to wait for every node
    secret: bytes = field(default=b"", repr=False)  # signs the nodes' messages (``signed_store``)


@dataclass(frozen=True)
class FaultPolicy:
    """What ends a launch, and what restarts it."""

    grace_period: float = 2.0  # seconds between SIGTERM and SIGKILL
    max_restarts: int = 0  # a failed attempt is started again this many times
    stall_timeout: float | None = None  # no sign of life for this long ends the launch (LaunchStalled)
    timeout: float | None = None  # the whole launch may take this long (LaunchTimeout)
    monitor_interval: float = 0.1  # seconds between looks at the other nodes' health


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
    node_rank: int
    num_nodes: int
    rendezvous: RendezvousPlan = field(default_factory=RendezvousPlan)
    faults: FaultPolicy = field(default_factory=FaultPolicy)
    log_line_prefix: str | None = None  # e.g. "[{rank}]: " (torchrun's log_line_prefix_template)
    run_id: str = ""

    @property
    def grace_period(self) -> float:
        return self.faults.grace_period

    @property
    def world_size(self):
        return self.num_nodes * self.num_processes

    def global_rank(self, local_rank, node_rank=None):
        return (self.node_rank if node_rank is None else node_rank) * self.num_processes + local_rank

    @property
    def threads(self):
        """Intra-op threads per rank: this machine's usable cores shared out among the local ranks."""
        return threads_per_rank(usable_cpus(), self.num_processes)

    def environment(self, local_rank, master_port, restart_count=0, node_rank=None):
        """The environment of the rank with this local rank in one attempt (see ``rank_environment``)."""
        return rank_environment(
            local_rank=local_rank,
            num_processes=self.num_processes,
            node_rank=self.node_rank if node_rank is None else node_rank,
            num_nodes=self.num_nodes,
            master_addr=self.master_addr,
            master_port=master_port,
            mixed_precision=self.mixed_precision,
            device=self.device,
            threads=self.threads,
            run_id=self.run_id,
            restart_count=restart_count,
            max_restarts=self.faults.max_restarts,
        )


RDZV_BACKENDS = ("static", "c10d")


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
    rdzv_backend="static",
    rdzv_endpoint="",
    rdzv_conf=None,
    rdzv_id="none",
    rendezvous_timeout=300.0,
    max_restarts=0,
    monitor_interval=0.1,
    stall_timeout=None,
    timeout=None,
    log_line_prefix_template=None,
    secret=None,
):
    """Check the arguments and resolve the defaults.

    Returns:
        ``(plan, notices)``: one-line messages for the user (CPU ranks oversubscribed, "auto" chose
        spawn), usually none.

    Raises:
        TypeError: ``function`` is not callable or ``args`` is not a tuple or list.
        ValueError: a bad count, choice, rank, port or time.
        LaunchError: ``start_method="fork"`` when the kernel cannot be forked.
    """
    check_function(function, args)
    mixed_precision = mixed_precision.lower() if isinstance(mixed_precision, str) else mixed_precision
    check_choice("mixed_precision", mixed_precision, MIXED_PRECISIONS)
    check_choice("start_method", start_method, START_METHODS)
    check_choice("rdzv_backend", rdzv_backend, RDZV_BACKENDS)
    use_port = check_port_number(use_port)
    check_address("master_addr", master_addr)
    check_flush_interval()
    check_nodes(num_nodes, node_rank, use_port, rdzv_backend, rdzv_endpoint)
    faults = FaultPolicy(
        grace_period=check_seconds("grace_period", grace_period, zero_ok=True),
        max_restarts=check_count("max_restarts", max_restarts),
        stall_timeout=check_seconds("stall_timeout", stall_timeout, none_ok=True),
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
        use_port,
        check_endpoint(rdzv_endpoint),
        str(rdzv_id),
        conf,
        join_timeout,
        check_secret(secret, num_nodes),
    )
    check_prefix(log_line_prefix_template)
    if use_port is not None and node_rank == 0 and rdzv_backend == "static":
        check_port_free(master_addr, use_port)  # said now; the rendezvous binds it when the launch starts
    chosen = select_device(device)
    count = resolve_num_processes(num_processes, chosen, default_num_processes)
    method, notice = chosen.resolve_start_method(start_method, fork_hazards())
    notices = [text for text in (chosen.oversubscription(count), notice) if text]
    run_id = str(rdzv_id)
    if rdzv_id in (None, "none") and num_nodes == 1:
        run_id = uuid.uuid4().hex[:12]  # nodes share torchrun's default "none"; one node gets an id of its own
    plan = LaunchPlan(
        function,
        tuple(args),
        count,
        chosen,
        method,
        mixed_precision,
        master_addr,
        node_rank,
        num_nodes,
        meeting,
        faults,
        log_line_prefix_template,
        run_id,
    )
    return plan, notices


def check_function(function, args):
    if not callable(function):
        raise TypeError(f"function must be callable, got {type(function).__name__}: {function!r}")
    kind = _lazy_kind(function)
    if kind:
        raise TypeError(
            f"function {getattr(function, '__qualname__', function)!r} is {kind}: calling it on a rank would only"
            " create that object, not run the body. Launch a plain function (e.g. one that runs it with"
            " asyncio.run(...) or list(...))"
        )
    if not isinstance(args, (tuple, list)):
        raise TypeError(
            f"args must be a tuple or list of positional arguments, got {type(args).__name__}"
            f" (for one argument write args=({args!r},))"
        )


def _lazy_kind(function):
    """What calling ``function`` makes instead of running it ("a generator function", ...), or ""."""
    import inspect

    for test, kind in (
        (inspect.isasyncgenfunction, "an async generator function"),
        (inspect.iscoroutinefunction, "an async def function"),
        (inspect.isgeneratorfunction, "a generator function"),
    ):
        if test(function):
            return kind
    return ""


def check_address(name, address):
    """A host name or IP address (not empty: an empty one would bind every interface)."""
    if not isinstance(address, str) or not address.strip() or any(char.isspace() for char in address):
        raise ValueError(f"{name} must be a host name or IP address such as '127.0.0.1', got {address!r}")


def check_endpoint(endpoint):
    """c10d's ``host:port`` (or "" for ``master_addr:use_port``)."""
    if endpoint in (None, ""):
        return ""
    host, _, port = str(endpoint).rpartition(":") if isinstance(endpoint, str) else ("", "", "")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"rdzv_endpoint must be 'host:port' (or '' for master_addr:use_port), got {endpoint!r}")
    check_address("rdzv_endpoint's host", host.strip("[]"))
    return endpoint


def check_flush_interval():
    """``NOTEBOOK_LAUNCHER_FLUSH_INTERVAL`` (seconds between a rank's output flushes), read in the kernel
    so a bad value is one clear error here rather than a failure of every rank."""
    import os

    value = os.environ.get("NOTEBOOK_LAUNCHER_FLUSH_INTERVAL")
    if value is None:
        return
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (0 < seconds <= 86400):
        raise ValueError(
            f"NOTEBOOK_LAUNCHER_FLUSH_INTERVAL must be a number of seconds in (0, 86400], got {value!r};"
            " unset it for the default (0.05)"
        )


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def check_port_number(use_port):
    """None or a port number; digit strings (Accelerate's ``use_port="29500"`` style) become ints."""
    port = int(use_port) if isinstance(use_port, str) and use_port.isdigit() else use_port
    if port is not None and (not _is_int(port) or not 0 < port < 65536):
        raise ValueError(f"use_port must be None or a port number in 1..65535, got {use_port!r}")
    return port


def check_nodes(num_nodes, node_rank, use_port, backend="static", endpoint=""):
    if not _is_int(num_nodes) or num_nodes < 1:
        raise ValueError(f"num_nodes must be a positive int, got {num_nodes!r}")
    if not _is_int(node_rank) or not 0 <= node_rank < num_nodes:
        raise ValueError(f"node_rank must be an int in [0, {num_nodes}), got {node_rank!r}")
    if num_nodes > 1 and use_port is None and not (backend == "c10d" and endpoint):
        raise ValueError("with num_nodes > 1 every node must agree on the port: pass use_port= (and master_addr=)")


MAX_SECONDS = 30 * 24 * 3600.0  # the longest time any setting may name (30 days)


def check_seconds(name, value, none_ok=False, zero_ok=False):
    """A finite number of seconds (> 0, or >= 0 with ``zero_ok``, at most ``MAX_SECONDS``), or None
    with ``none_ok``. NaN and infinity are refused: NaN compares false with every deadline (a timer
    that never fires), and "no limit" is None."""
    if value is None and none_ok:
        return None
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok) or value > MAX_SECONDS:
        allowed = (
            "a number of seconds "
            + (">= 0" if zero_ok else "> 0")
            + f" and at most {MAX_SECONDS:.0f} (30 days)"
            + (", or None for no limit" if none_ok else "")
        )
        raise ValueError(f"{name} must be {allowed}, got {value!r}")
    return float(value)


def check_count(name, value):
    if not _is_int(value) or value < 0:
        raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    return value


# torch elastic's own tuning of its dynamic rendezvous: accepted (torchrun and Accelerate pass them),
# nothing to tune in ours
_TORCH_RDZV_KNOBS = (
    "last_call_timeout",
    "close_timeout",
    "read_timeout",
    "keep_alive_interval",
    "keep_alive_max_attempt",
    "timeout",
    "is_host",
    "use_libuv",
)


def check_rdzv_conf(conf):
    if conf is None:
        return {}
    if not isinstance(conf, dict):
        raise ValueError(f"rdzv_conf must be a dict of rendezvous settings or None, got {type(conf).__name__}")
    unknown = sorted(str(key) for key in conf if key not in ("join_timeout", *_TORCH_RDZV_KNOBS))
    if unknown:
        raise ValueError(
            f"rdzv_conf has settings notebook_launcher does not know: {', '.join(unknown)}; it takes"
            " join_timeout (torch elastic's own tuning settings are accepted and have no effect)"
        )
    return {key: value for key, value in conf.items() if key == "join_timeout"}


SECRET_VARIABLE = "NOTEBOOK_LAUNCHER_SECRET"


def check_secret(secret, num_nodes):
    """The key that signs the nodes' messages: ``secret`` or ``NOTEBOOK_LAUNCHER_SECRET``, the same on
    every node (required with several nodes); a random one a single node keeps to itself."""
    import os
    import secrets

    if secret is None:
        secret = os.environ.get(SECRET_VARIABLE)
    if secret is None:
        if num_nodes > 1:
            raise ValueError(
                "with num_nodes > 1 the nodes must share a secret that signs their messages (the rendezvous"
                f" store itself has no authentication): pass the same secret= on every node, or set {SECRET_VARIABLE};"
                " e.g. secrets.token_hex(16), sent to the other machines as you would a password"
            )
        return secrets.token_bytes(16)
    if isinstance(secret, str):
        secret = secret.encode()
    if not isinstance(secret, bytes) or len(secret) < 8:
        raise ValueError(f"secret must be a str or bytes of at least 8 characters (got {type(secret).__name__})")
    return secret


def check_prefix(template):
    """torchrun's ``log_line_prefix_template``: may use {rank}, {local_rank} and {role_name}."""
    if template is None:
        return
    if not isinstance(template, str):
        raise ValueError(f"log_line_prefix_template must be a str or None, got {type(template).__name__}")
    try:
        template.format(rank=0, local_rank=0, role_name="default")
    except (KeyError, IndexError, ValueError) as err:
        raise ValueError(
            f"log_line_prefix_template={template!r} may use only {{rank}}, {{local_rank}} and {{role_name}}: {err}"
        ) from None


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
