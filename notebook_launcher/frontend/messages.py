"""The messages between the kernel and the JupyterLab sidebar (mirrored in labextension/src/messages.ts).

Comm target: ``notebook_launcher``, in both directions. The sidebar opens a comm and the kernel
answers with a state; a kernel that imports the package opens a comm to the front end with a
``Hello`` so an open sidebar connects without a click (front ends without the sidebar close it).

Front end → kernel:
    GetState      {"type": "get_state", "page": str}   (the comm's open data; ``page``: the browser tab,
                  kept across reloads: an earlier comm of the same page is closed)
    SetSettings   {"type": "set_settings", "request_id": str, "settings": {field: value, ...}}
    StopLaunch    {"type": "stop_launch", "request_id": str, "id": str}
    SectionAction {"type": "section_action", "request_id": str, "section": str, "action": str}
                  (a backend section's button: ``Backend.act``)
    Alive         {"type": "alive"}   (every 30 s while the sidebar is open; no reply)

Kernel → front end:
    Hello         {"type": "hello"}                      (on a comm the kernel opens)
    State         {"type": "state", "history": int, "inventory": Inventory, "settings": Settings,
                   "choices": {"start_method": [...], "mixed_precision": [...]}, "launches": [LaunchInfo],
                   "sections": {name: StatusSection | None}}
    Reply         {"type": "reply", "request_id": str, "ok": bool, "error": str | None, "settings": Settings}
    LaunchUpdate  {"type": "launch", "launch": LaunchInfo}
    SettingsUpdate {"type": "settings", "settings": Settings}   (changed from code or another panel)
    SectionUpdate {"type": "section", "name": str, "section": StatusSection | None}   (a backend's
                  section changed: the start server warmed, a cluster's warm actors came or went)

A backend's sections (``backends.status``: a title, a state, rows of text, buttons) are drawn the
same whatever the backend, so a new backend's status reaches the sidebar without a change here or in
the TypeScript.

``history`` is how many finished launches the kernel keeps listed; the panel keeps as many. The
sidebar closes its comm when its page goes (a reload, a closed tab); a page that went without
closing it (a crash, a lost network) stops saying ``Alive``, and the kernel closes a comm that said
it once and then nothing for ``SILENT_AFTER`` seconds, instead of sending to it for ever.
Nothing the kernel receives is executed: settings are checked against the choices and the devices
found, a stop names a launch by id, and a bad message gets ``ok: false`` with the reason and changes
nothing.
"""

from __future__ import annotations

from typing import TypedDict

__all__ = [
    "Settings",
    "LaunchInfo",
    "Reply",
    "launch_info",
    "HISTORY",
]

HISTORY = 20  # finished launches listed


class Settings(TypedDict):
    num_processes: int | None
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
    cell: int | None  # the execution count of the cell that launched it
    waited_on: bool  # a cell is blocked in wait() on it (Stop then interrupts the kernel)
    attempt: int  # restarts so far
    kind: str  # "launch", or "workers" (``start_workers``)
    places: dict  # rank → "node 1 (10.0.0.2)", for ranks on a cluster; {} for ranks on this machine


class Reply(TypedDict):
    type: str
    request_id: str | None
    ok: bool
    error: str | None
    settings: Settings


def launch_info(launch) -> LaunchInfo:
    """The LaunchInfo of a ``Launch``."""
    return {
        "id": launch.id,
        "ranks": launch.ranks,
        "rank_status": {str(rank): launch.rank_status(rank) for rank in launch.ranks},
        "status": launch.status,
        "elapsed": round(launch.elapsed, 2),
        "device": launch.plan.device.name,
        "start_method": launch.plan.start_method,
        "cell": launch.cell,
        "waited_on": launch.waited_on,
        "attempt": launch.attempt,
        "kind": launch.kind,
        "places": {str(rank): str(place) for rank in launch.ranks if (place := launch.place(rank)) is not None},
    }
