"""The local backend's sidebar section: its spawn start server, in one line.

Examples:
    >>> server_section({"state": "warm", "pid": 4242, "torch": "2.13.0", "ranks_started": 6})["rows"][0]["text"]
    'Spawn start server: warm · pid 4242 · torch 2.13.0 preloaded · 6 ranks started'
    >>> server_section({"state": "not started"})["state"]
    'idle'
"""

from __future__ import annotations

from typing import Any

from ..status import StatusSection, row, section

__all__ = ["server_section"]

_STATES = {"not started": "idle", "starting": "busy", "warm": "ok", "stopped": "off", "failed": "error", "off": "off"}
_HINT = "Spawn-path ranks are forked from this process: it has torch imported and has never touched a device."


def server_section(info: dict[str, Any]) -> StatusSection:
    """The section of ``server.start_server_info()``: one row, styled as a problem when it failed."""
    state = str(info.get("state", "not started"))
    parts = [f"Spawn start server: {state}"]
    if state == "not started":
        parts[0] += " (starts with the first spawn launch)"
    if info.get("pid") is not None and state not in ("not started", "off"):
        parts.append(f"pid {info['pid']}")
    if info.get("torch"):
        parts.append(f"torch {info['torch']} preloaded")
    started = int(info.get("ranks_started", 0))
    if started:
        parts.append(f"{started} rank{'s' if started != 1 else ''} started")
    live = int(info.get("live_ranks", 0))
    if live:
        parts.append(f"{live} running")
    preloaded = list(info.get("preloaded", []))
    hint = _HINT + (f" Preloaded: {', '.join(map(str, preloaded))}." if preloaded else "")
    look = _STATES.get(state, "warn")
    style = "error" if look == "error" else "note"
    return section("", look, [row(" · ".join(parts), style, key="server", hint=hint)])
