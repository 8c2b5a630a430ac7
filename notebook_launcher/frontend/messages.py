"""The messages between the kernel and the JupyterLab sidebar (mirrored in labextension/src/messages.ts).

Comm target: ``notebook_launcher``. The sidebar opens a comm; the kernel answers with a state.

Front end → kernel:
    GetState      {"type": "get_state"}
    SetSettings   {"type": "set_settings", "request_id": str, "settings": {field: value, ...}}

Kernel → front end:
    State         {"type": "state", "inventory": Inventory, "settings": Settings,
                   "choices": {"start_method": [...], "mixed_precision": [...]}, "launches": [LaunchInfo]}
    Reply         {"type": "reply", "request_id": str, "ok": bool, "error": str | None, "settings": Settings}
    LaunchUpdate  {"type": "launch", "launch": LaunchInfo}

Nothing the kernel receives is executed: settings are checked against the choices and the devices
found, and a bad message gets ``ok: false`` with the reason and changes nothing.
"""

from __future__ import annotations

from typing import Optional, TypedDict


class Settings(TypedDict):
    num_processes: Optional[int]
    start_method: str
    mixed_precision: str


class LaunchInfo(TypedDict):
    id: str
    ranks: list
    rank_status: dict
    status: str
    elapsed: float
    device: str
    start_method: str


class Reply(TypedDict):
    type: str
    request_id: str
    ok: bool
    error: Optional[str]
    settings: Settings


def launch_info(launch):
    """The LaunchInfo of a ``Launch``."""
    return {
        "id": launch.id,
        "ranks": launch.ranks,
        "rank_status": {str(rank): launch.rank_status(rank) for rank in launch.ranks},
        "status": launch.status,
        "elapsed": round(launch.elapsed, 2),
        "device": launch.plan.device.name,
        "start_method": launch.plan.start_method,
    }
