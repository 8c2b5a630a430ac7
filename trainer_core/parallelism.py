"""``ParallelismConfig``: the ranks as a mesh, FSDP2 over one dimension, tensor parallelism over another.

With ``Accelerator(parallelism_config=ParallelismConfig(dp_shard_size=2, tp_size=2),
fsdp_plugin=...)`` on 4 ranks, the ranks form a 2 x 2 mesh (``accelerator.torch_device_mesh``,
dimensions named as in Accelerate: "dp_shard", "tp", and "dp", the data-parallel ranks flattened).
The user splits layers over the "tp" dimension with torch's ``parallelize_module`` (ColwiseParallel,
RowwiseParallel); ``prepare`` then shards the model with FSDP2 over "dp_shard" only, and data
loaders hand the ranks of one tensor-parallel group the same batches: a mesh row sees the data a
single rank would.

Examples:
    >>> config = ParallelismConfig(dp_shard_size=2, tp_size=2)
    >>> config.total_size, config.mesh_shape()
    (4, (('dp_shard', 2), ('tp', 2)))
    >>> ParallelismConfig(cp_size=2)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: ParallelismConfig(cp_size=2): context parallelism is not supported ...
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ParallelismConfig", "parallelism_config_from", "MeshMethods"]

_UNSUPPORTED = {
    "cp_size": "context parallelism",
    "sp_size": "sequence parallelism",
    "dp_replicate_size": "replicated data parallelism (HSDP)",
}


@dataclass
class ParallelismConfig:
    """How many ranks each kind of parallelism spans; their product is the number of processes.

    Args:
        dp_shard_size: ranks the model is sharded over by FSDP2 (``fsdp_plugin`` required above 1).
        tp_size: ranks each tensor-parallel layer is split over (the user's ``parallelize_module``
            on ``accelerator.torch_device_mesh["tp"]``).
        dp_replicate_size, cp_size, sp_size: Accelerate's other dimensions; only 1 is supported
            here, anything else is refused by name.
    """

    dp_replicate_size: int = 1
    dp_shard_size: int = 1
    tp_size: int = 1
    cp_size: int = 1
    sp_size: int = 1

    def __post_init__(self) -> None:
        for name in ("dp_replicate_size", "dp_shard_size", "tp_size", "cp_size", "sp_size"):
            value = getattr(self, name)
            if value is None:
                setattr(self, name, 1)
            elif not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"ParallelismConfig({name}={value!r}): sizes are ints >= 1")
        for name, what in _UNSUPPORTED.items():
            if getattr(self, name) > 1:
                raise ValueError(
                    f"ParallelismConfig({name}={getattr(self, name)}): {what} is not supported by trainer_core;"
                    " dp_shard_size (FSDP2) and tp_size (tensor parallelism) are"
                )

    @property
    def total_size(self) -> int:
        return self.dp_replicate_size * self.dp_shard_size * self.tp_size * self.cp_size * self.sp_size

    @property
    def tp_enabled(self) -> bool:
        return self.tp_size > 1

    @property
    def dp_shard_enabled(self) -> bool:
        return self.dp_shard_size > 1

    @property
    def data_parallel_size(self) -> int:
        return self.dp_replicate_size * self.dp_shard_size

    def mesh_shape(self) -> tuple[tuple[str, int], ...]:
        """The mesh's dimensions above size 1, outermost first (Accelerate's order)."""
        dimensions = (("dp_shard", self.dp_shard_size), ("tp", self.tp_size))
        return tuple((name, size) for name, size in dimensions if size > 1)

    def build_device_mesh(self, device_type: str, num_processes: int, sharded: bool) -> Any:
        """The ranks' ``DeviceMesh`` (with "dp" flattened from the data-parallel dimensions), or None
        for a config of size 1. ``sharded``: an FSDP plugin was given (needed to shard over "dp_shard")."""
        if self.total_size != num_processes:
            raise ValueError(
                f"ParallelismConfig spans {self.total_size} ranks (dp_shard_size={self.dp_shard_size} x"
                f" tp_size={self.tp_size}) but the launch has {num_processes} processes"
            )
        if self.total_size == 1:
            return None
        if not sharded:
            raise ValueError(
                "ParallelismConfig needs fsdp_plugin: trainer_core runs tensor parallelism with FSDP2 sharding"
                " over the data-parallel ranks (dp_shard_size), as Accelerate does"
            )
        if not self.dp_shard_enabled:
            raise ValueError(
                "fsdp_plugin with a ParallelismConfig whose dp_shard_size is 1 has no ranks to shard over:"
                " lower tp_size and raise dp_shard_size"
            )
        from torch.distributed.device_mesh import init_device_mesh

        names, sizes = zip(*self.mesh_shape(), strict=True)
        mesh = init_device_mesh(device_type, sizes, mesh_dim_names=names)
        if len(names) > 1:
            mesh["dp_shard"]._flatten("dp")  # Accelerate's name for the data-parallel ranks
        return mesh


def parallelism_config_from(source: Any) -> ParallelismConfig | None:
    """Our ``ParallelismConfig`` from ours, Accelerate's (its sizes), or None.

    Examples:
        >>> parallelism_config_from(None) is None
        True
        >>> parallelism_config_from(ParallelismConfig(tp_size=2)).tp_size
        2
    """
    if source is None or isinstance(source, ParallelismConfig):
        return source
    names = ("dp_replicate_size", "dp_shard_size", "tp_size", "cp_size", "sp_size")
    return ParallelismConfig(**{name: getattr(source, name, 1) for name in names})  # None counts as 1


class MeshMethods:
    """The Accelerator's view of its mesh, under Accelerate's names (``torch_device_mesh``, ranks
    along each dimension). Expects ``self.parallelism_config`` and ``self._mesh``."""

    parallelism_config: ParallelismConfig | None
    _mesh: Any

    @property
    def torch_device_mesh(self) -> Any:
        """The ranks' ``DeviceMesh`` ("dp_shard", "tp", and "dp"), or None without a ParallelismConfig."""
        return self._mesh

    @property
    def tensor_parallel_rank(self) -> int:
        """This rank's coordinate along "tp" (0 when tensor parallelism is off)."""
        return self._local_rank("tp")

    @property
    def data_parallel_shard_rank(self) -> int:
        """This rank's coordinate along "dp_shard" (0 when FSDP is not in the mesh)."""
        return self._local_rank("dp_shard")

    @property
    def data_parallel_rank(self) -> int:
        """Which share of the data this rank sees (the same for a tensor-parallel group)."""
        return self._local_rank("dp_shard")

    def _local_rank(self, dimension: str) -> int:
        if self.parallelism_config is None:
            raise RuntimeError(f"no ParallelismConfig was given to the Accelerator, so there is no {dimension!r} rank")
        names = (self._mesh.mesh_dim_names or ()) if self._mesh is not None else ()
        return self._mesh.get_local_rank(dimension) if dimension in names else 0
