"""What the sidebar shows of the Ray cluster this kernel is connected to: its nodes, their
resources, what is free, and the kernel's warm rank actors.

Nothing here imports Ray or connects: a kernel that has not connected (no cluster launch yet, and no
``ray.init`` of its own) has no cluster to show, and ``cluster_info()`` is None.

Examples:
    >>> cluster_info() is None      # this process has not connected to a cluster
    True
"""

from __future__ import annotations

import sys
from typing import Any

from .head_watch import lost_reason
from .pool import _resources, pool_info, resource_amounts

__all__ = ["cluster_info"]


def cluster_info() -> dict | None:
    """The cluster as the sidebar's ``ClusterInfo`` message has it, or None when not connected.

    ``{"address": str, "nodes": [{"address", "alive", "head", "resources"}], "total": {...},
    "free": {...}, "warm": pool_info() or None, "error": str | None}``; ``error`` says why the
    cluster could not be read (it went away), and the lists are then empty.
    """
    ray = sys.modules.get("ray")
    if ray is None or not _connected(ray):
        return None
    info: dict[str, Any] = {
        "address": _address(ray),
        "nodes": [],
        "total": {},
        "free": {},
        "warm": pool_info(),
        "error": None,
    }
    lost = lost_reason()
    if lost is not None:  # asking a cluster whose head is gone waits, and the kernel is leaving it
        info["error"] = lost
        return info
    try:
        nodes = ray.nodes()
    except Exception as err:  # the head went away under a connected kernel
        info["error"] = f"{type(err).__name__}: {err}"
        return info
    info["nodes"] = [
        {
            "address": str(node.get("NodeManagerAddress", "")),
            "alive": bool(node.get("Alive")),
            "head": "node:__internal_head__" in node.get("Resources", {}),
            "resources": resource_amounts(node.get("Resources", {})),
        }
        for node in sorted(nodes, key=lambda node: (not node.get("Alive"), node.get("NodeManagerAddress", "")))
    ]
    info["total"] = _resources(ray.cluster_resources)
    info["free"] = _resources(ray.available_resources)
    return info


def _connected(ray: Any) -> bool:
    try:
        return bool(ray.is_initialized())
    except Exception:
        return False


def _address(ray: Any) -> str:
    from .connect import connected_address

    if connected_address:
        return connected_address
    try:
        return str(ray.get_runtime_context().gcs_address)
    except Exception:  # a Ray Client connection made by the user's own ray.init
        return "connected"
