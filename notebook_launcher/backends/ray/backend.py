"""The Ray backend: one Ray actor per rank on a cluster, driven from this kernel
(``launch(..., cluster="ray")`` or ``cluster="ray://host:10001"``). Importing it does not import Ray.

Examples:
    >>> backend = RayBackend()
    >>> options = backend.check_options("ray", {"placement_strategy": "spread"})
    >>> placement = backend.place(options, PlacementRequest(num_processes=4))
    >>> options.strategy, placement.device.name, placement.num_processes, placement.start_method
    ('SPREAD', 'cpu', 4, 'ray')
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..base import Backend, Placement, PlacementRequest, StatusListener
from ..status import StatusSection
from .options import RayOptions, check_cluster, cluster_ranks

if TYPE_CHECKING:
    from ..base import Starter
    from ..plans import LaunchPlan

__all__ = ["RayBackend"]


class RayBackend(Backend):
    """Ranks on a Ray cluster; its options are a ``RayOptions``. Nothing starts when the package is
    imported in a kernel: Ray is imported and reached only by a cluster launch."""

    name = "ray"
    option_names: tuple[str, ...] = ("resources_per_rank", "placement_strategy")

    def check_options(self, cluster: str | None, options: Mapping[str, Any]) -> RayOptions:
        unknown = [name for name in options if name not in self.option_names]
        if unknown:
            raise TypeError(f"launch() got unexpected keyword arguments: {', '.join(map(repr, unknown))}")
        return check_cluster(cluster, **options)

    def place(self, options: RayOptions, request: PlacementRequest) -> Placement:
        device, count, method = cluster_ranks(
            options, request.num_processes, request.device, request.start_method, request.num_nodes
        )
        return Placement(device, count, method)

    def starter(self, plan: LaunchPlan) -> Starter:
        from .starter import RayStarter

        return RayStarter()

    def status(self) -> dict[str, StatusSection | None]:
        """The sidebar's cluster section (None while this kernel is not connected to a cluster)."""
        from .info import cluster_info, cluster_section

        return {"cluster": cluster_section(cluster_info())}

    def observe(self, listener: StatusListener) -> Callable[[], None]:
        from .info import cluster_info, cluster_section
        from .pool import observe_pool

        return observe_pool(lambda: listener("cluster", cluster_section(cluster_info())))

    def act(self, section: str, action: str) -> None:
        """The cluster section's button: release the kernel's idle warm actors."""
        from .info import RELEASE
        from .pool import release_pool

        if section != "cluster":
            raise LookupError(section)
        if action != RELEASE:
            raise ValueError(f"the cluster section has no action {action!r}")
        if not release_pool():
            raise ValueError("no idle warm actors to release (a launch is using them, or there are none)")
