"""The one function that writes a rank's environment: the torchrun variables and our own.

Examples:
    >>> from notebook_launcher.devices import CpuDevice
    >>> env = rank_environment(local_rank=1, num_processes=2, node_rank=0, num_nodes=1,
    ...                        master_addr="127.0.0.1", master_port=29500, mixed_precision="no",
    ...                        device=CpuDevice(), threads=1)
    >>> env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"], env["MASTER_PORT"]
    ('1', '2', '1', '29500')
"""

from __future__ import annotations

import os

from ..devices import Device

__all__ = ["rank_environment", "threads_per_rank"]


def threads_per_rank(usable_cpus: int, local_ranks: int) -> int:
    """Intra-op threads each rank gets so the ranks do not fight over cores (at least 1).

    Examples:
        >>> threads_per_rank(16, 3), threads_per_rank(2, 4)
        (5, 1)
    """
    return max(1, usable_cpus // max(1, local_ranks))


def rank_environment(
    *,
    local_rank: int,
    num_processes: int,
    node_rank: int,
    num_nodes: int,
    master_addr: str,
    master_port: int,
    mixed_precision: str,
    device: Device,
    threads: int,
    run_id: str = "none",
    restart_count: int = 0,
    max_restarts: int = 0,
) -> dict[str, str]:
    """Environment variables for one rank, as strings.

    The torchrun set (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``,
    ``NODE_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``) makes plain ``init_process_group()``, Hugging Face
    Accelerate and our Accelerator work unchanged. ``ACCELERATE_MIXED_PRECISION`` carries the launcher's
    ``mixed_precision`` to every Accelerator created in the rank (ours and Hugging Face's read it).
    The torchelastic set (``TORCHELASTIC_RUN_ID``, ``GROUP_WORLD_SIZE``, ``ROLE_NAME``,
    ``TORCHELASTIC_RESTART_COUNT``, ``TORCHELASTIC_MAX_RESTARTS``) makes
    ``torch.distributed.is_torchelastic_launched()`` true, as under torchrun, so libraries such as
    Lightning pick the right cluster environment; ``TORCHELASTIC_USE_AGENT_STORE`` makes every rank
    a client of the store the kernel hosts (``rendezvous``). ``TORCH_DIST_INIT_BARRIER`` makes
    ``init_process_group`` return only once every rank's gloo connections are made: without it a
    rank that returns (and exits) right after it can break a peer's ``connectFullMesh`` ("Connection
    closed by peer"; 3 launches in 120 on a loaded 2-core machine).
    ``OMP_NUM_THREADS`` and ``TORCH_DIST_INIT_BARRIER`` are set only when the kernel has not set
    them. The device adjusts the result.
    """
    rank = node_rank * num_processes + local_rank
    env = {
        "RANK": rank,
        "LOCAL_RANK": local_rank,
        "WORLD_SIZE": num_nodes * num_processes,
        "LOCAL_WORLD_SIZE": num_processes,
        "GROUP_RANK": node_rank,
        "NODE_RANK": node_rank,
        "ROLE_RANK": rank,
        "ROLE_WORLD_SIZE": num_nodes * num_processes,
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": master_port,
        "ACCELERATE_MIXED_PRECISION": mixed_precision,
        "NOTEBOOK_LAUNCHER_DEVICE": device.name,
        "TORCHELASTIC_RUN_ID": run_id,
        "GROUP_WORLD_SIZE": num_nodes,
        "ROLE_NAME": "default",
        "TORCHELASTIC_RESTART_COUNT": restart_count,
        "TORCHELASTIC_MAX_RESTARTS": max_restarts,
        "TORCHELASTIC_USE_AGENT_STORE": True,
    }
    defaults = {"OMP_NUM_THREADS": threads, "TORCH_DIST_INIT_BARRIER": 1}
    env.update({key: value for key, value in defaults.items() if key not in os.environ})
    return device.rank_environment({key: str(value) for key, value in env.items()})
