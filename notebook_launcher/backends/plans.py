"""What a launch is, checked: the frozen plans a backend receives (``launching.plan.make_plan``
builds them from the user's arguments). Plain data below the launch core, so a backend reads a plan
without importing the core that makes it.

Examples:
    >>> from notebook_launcher.devices import CpuDevice
    >>> plan = LaunchPlan(print, (), num_processes=2, device=CpuDevice(), start_method="fork",
    ...                   mixed_precision="no", master_addr="127.0.0.1", node_rank=0, num_nodes=1)
    >>> plan.world_size, plan.global_rank(1), plan.environment(1, 29500)["RANK"]
    (2, 1, '1')
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..choices import FLUSH_INTERVAL, STRAGGLER_TIMEOUT
from ..devices import Device
from ..devices.probe import usable_cpus
from ..wire.environment import rank_environment, threads_per_rank

__all__ = ["FaultPolicy", "LaunchPlan", "RendezvousPlan"]


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
    straggler_timeout: float | None = STRAGGLER_TIMEOUT  # silent this long after another rank returned: ended
    timeout: float | None = None  # the whole launch may take this long (LaunchTimeout)
    monitor_interval: float = 0.1  # seconds between looks at the other nodes' health
    stall_hint: str | None = None  # the devices' likely cause of a stall, added to LaunchStalled's message


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
    flush_interval: float = FLUSH_INTERVAL  # seconds between a rank's output flushes
    backend: str = "local"  # where the ranks run (``backends``): its registered name
    options: Any = None  # that backend's checked options (a frozen dataclass, e.g. Ray's ``RayOptions``)

    @property
    def grace_period(self) -> float:
        return self.faults.grace_period

    @property
    def world_size(self) -> int:
        return self.num_nodes * self.num_processes

    def global_rank(self, local_rank: int, node_rank: int | None = None) -> int:
        return (self.node_rank if node_rank is None else node_rank) * self.num_processes + local_rank

    @property
    def threads(self) -> int:
        """Intra-op threads per rank: this machine's usable cores shared out among the local ranks."""
        return threads_per_rank(usable_cpus(), self.num_processes)

    def environment(
        self, local_rank: int, master_port: int, restart_count: int = 0, node_rank: int | None = None
    ) -> dict[str, str]:
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
