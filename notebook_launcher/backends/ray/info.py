"""What the sidebar shows of the Ray cluster this kernel is connected to: its nodes, their
resources, what is free, and the kernel's warm rank actors (``cluster_info``), as a section of the
sidebar (``cluster_section``, with a button that releases idle warm actors).

Nothing here imports Ray or connects: a kernel that has not connected (no cluster launch yet, and no
``ray.init`` of its own) has no cluster to show, and ``cluster_info()`` is None.

Examples:
    >>> cluster_info() is None      # this process has not connected to a cluster
    True
    >>> info = {"address": "127.0.0.1:6379", "error": None, "total": {"CPU": 4}, "free": {"CPU": 2},
    ...         "nodes": [{"address": "127.0.0.1", "alive": True, "head": True, "resources": {"CPU": 4}}],
    ...         "warm": {"ranks": 2, "nodes": ["node 0: 2"], "launches": 1, "in_use": False}}
    >>> [row["text"] for row in cluster_section(info)["rows"]]
    ['127.0.0.1 (head) · CPU 4', 'Free: CPU 2 of 4', 'Warm rank actors: 2 (node 0: 2) · 1 launch · idle']
"""

from __future__ import annotations

import sys
from typing import Any

from ..status import StatusSection, action, row, section
from .head_watch import lost_reason
from .pool import _resources, pool_info, resource_amounts

__all__ = ["cluster_info", "cluster_section", "RELEASE"]

RELEASE = "release"  # the section's action: release the idle warm actors
_LOST_SHOWN = 3  # Ray lists lost nodes for ever (an autoscaled cluster has many): the first few


def cluster_info() -> dict | None:
    """The cluster as ``cluster_section`` reads it, or None when not connected.

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


def cluster_section(info: dict | None) -> StatusSection | None:
    """The sidebar's section of ``cluster_info()`` (None: not connected, nothing shown): the live
    nodes, the lost ones in one line, what is free (or why the cluster could not be read) and the
    warm actors, with a button that releases them when no launch uses them."""
    if info is None:
        return None
    rows = [row(_node(node), key="node") for node in info["nodes"] if node["alive"]]
    lost = [node["address"] for node in info["nodes"] if not node["alive"]]
    if lost:
        more = f" and {len(lost) - _LOST_SHOWN} more" if len(lost) > _LOST_SHOWN else ""
        rows.append(row(f"Lost: {', '.join(lost[:_LOST_SHOWN])}{more}", "warn", key="lost"))
    if info["error"]:
        rows.append(row(f"The cluster could not be read: {info['error']}", "error", key="error"))
    else:
        rows.append(row(f"Free: {_free(info['free'], info['total'])}", "note", key="free"))
    warm = info["warm"]
    actions = []
    if warm:
        launches = f"{warm['launches']} launch{'es' if warm['launches'] != 1 else ''}"
        use = "in use" if warm["in_use"] else "idle"
        rows.append(
            row(
                f"Warm rank actors: {warm['ranks']} ({'; '.join(warm['nodes'])}) · {launches} · {use}",
                "note",
                key="warm",
            )
        )
        if not warm["in_use"]:
            actions.append(action(RELEASE, "Release warm actors"))
    else:
        rows.append(row("Warm rank actors: none (the next cluster launch starts them)", "note", key="warm"))
    state = "error" if info["error"] else "busy" if warm and warm["in_use"] else "ok"
    return section(f"Ray cluster · {info['address']}", state, rows, actions)


def _node(node: dict) -> str:
    """One live node, e.g. "127.0.0.1 (head) · CPU 2 · GPU 1"."""
    resources = [f"{name} {amount}" for name, amount in node["resources"].items()]
    return " · ".join([f"{node['address']}{' (head)' if node['head'] else ''}", *resources])


def _free(free: dict, total: dict) -> str:
    """What is free of what the cluster has, e.g. "CPU 2 of 4 · GPU 0 of 1"."""
    if not total:
        return "nothing (no live node)"
    return " · ".join(f"{name} {free.get(name, 0)} of {amount}" for name, amount in total.items())
