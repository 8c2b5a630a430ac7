"""The checked cluster arguments of a launch: where the cluster is, what each rank needs, how the
ranks are spread.

Examples:
    >>> plan = check_cluster("ray", {"CPU": 2}, "spread")
    >>> plan.address, plan.resources, plan.strategy, plan.device
    (None, {'CPU': 2}, 'SPREAD', 'cpu')
    >>> check_cluster("ray://head:10001", None, None).address
    'ray://head:10001'
    >>> check_cluster("slurm", None, None)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: cluster='slurm' is not valid; use 'ray' (...) or 'ray://host:port' (Ray Client)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...choices import is_int

if TYPE_CHECKING:
    from ...devices import Device

__all__ = ["RayOptions", "check_cluster", "cluster_ranks", "STRATEGIES"]

STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


@dataclass(frozen=True)
class RayOptions:
    """A launch on a Ray cluster: ``address`` None is the cluster ``ray.init()`` finds."""

    address: str | None = None
    resources: dict = field(default_factory=lambda: {"CPU": 1})
    strategy: str = "PACK"

    @property
    def device(self) -> str:
        """ "cuda" when each rank asks for a GPU, else "cpu"."""
        return "cuda" if self.resources.get("GPU", 0) > 0 else "cpu"

    @property
    def cpus(self) -> int:
        """Threads a rank may use: its CPUs, at least one."""
        return max(1, int(self.resources.get("CPU", 1)))

    def describe(self, ranks: int) -> str:
        """What the launch asks of the cluster, e.g. "2 ranks x {'CPU': 1} (PACK)"."""
        return f"{ranks} rank{'s' if ranks != 1 else ''} x {self.resources} ({self.strategy})"


def check_cluster(cluster: Any, resources_per_rank: Any = None, placement_strategy: Any = None) -> RayOptions:
    """The ``RayOptions`` of the arguments.

    Args:
        cluster: "ray" (the cluster ``ray.init()`` finds: ``RAY_ADDRESS`` or a running head) or
            "ray://host:10001" (Ray Client).
        resources_per_rank: what each rank's actor reserves, e.g. ``{"GPU": 1}`` or ``{"CPU": 2}``
            (default ``{"CPU": 1}``); with a GPU the ranks are CUDA ranks.
        placement_strategy: how Ray spreads the ranks: "PACK" (default: as few nodes as possible),
            "SPREAD", "STRICT_PACK" or "STRICT_SPREAD". The launch starts whole or not at all.

    Raises:
        ValueError: an unknown cluster, a bad resource or strategy.
    """
    if cluster == "ray":
        address = None
    elif isinstance(cluster, str) and cluster.startswith("ray://") and len(cluster) > len("ray://"):
        address = cluster
    else:
        raise ValueError(
            f"cluster={cluster!r} is not valid; use 'ray' (the cluster ray.init() finds: RAY_ADDRESS or a"
            " running head on this machine) or 'ray://host:port' (Ray Client)"
        )
    strategy = "PACK" if placement_strategy is None else str(placement_strategy).upper()
    if strategy not in STRATEGIES:
        raise ValueError(f"placement_strategy={placement_strategy!r} is not valid; use one of {', '.join(STRATEGIES)}")
    return RayOptions(address, _check_resources(resources_per_rank), strategy)


def _check_resources(resources: Any) -> dict:
    if resources is None:
        return {"CPU": 1}
    if not isinstance(resources, dict) or not resources:
        raise ValueError(f"resources_per_rank must be a non-empty dict such as {{'GPU': 1}}, got {resources!r}")
    checked = {}
    for name, amount in resources.items():
        if not isinstance(name, str) or isinstance(amount, bool) or not isinstance(amount, (int, float)) or amount < 0:
            raise ValueError(
                f"resources_per_rank[{name!r}]={amount!r} is not valid; each resource is a name and a number >= 0"
            )
        if name == "GPU" and not is_int(amount) and amount > 1:
            raise ValueError(f"resources_per_rank['GPU']={amount!r}: more than one GPU per rank must be a whole number")
        checked[name] = amount
    checked.setdefault("CPU", 1)
    return checked


def cluster_ranks(
    plan: RayOptions, num_processes: Any, device: str, start_method: str | None, num_nodes: int
) -> tuple[Device, int, str]:
    """The device, rank count and start method ("ray") of a cluster launch.

    Examples:
        >>> device, count, method = cluster_ranks(RayOptions(), 4, "auto", "auto", 1)
        >>> device.name, count, method
        ('cpu', 4, 'ray')

    Raises:
        ValueError: no rank count, several nodes, fork, or a device the resources do not give.
    """
    from ...devices import CpuDevice, CudaDevice

    if num_processes is None or not is_int(num_processes) or num_processes < 1:
        raise ValueError(
            f"num_processes must be a whole number of ranks >= 1 with cluster='ray' (the cluster's size is not"
            f" guessed), got {num_processes!r}"
        )
    if num_nodes != 1:
        raise ValueError(
            f"num_nodes={num_nodes}: with cluster='ray' one kernel drives every rank and Ray chooses the nodes;"
            " leave num_nodes at 1 and set num_processes to the total number of ranks"
        )
    if start_method not in (None, "auto", "spawn"):
        raise ValueError(
            f"start_method={start_method!r} does not apply with cluster='ray': ranks on the cluster get the"
            " function by value, as with 'spawn'"
        )
    if device not in ("auto", plan.device):
        raise ValueError(
            f"device={device!r} does not match resources_per_rank={plan.resources}: ask for"
            f" {{'GPU': 1}} for CUDA ranks, none for CPU ranks"
        )
    return (CudaDevice() if plan.device == "cuda" else CpuDevice()), num_processes, "ray"
