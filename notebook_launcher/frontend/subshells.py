"""A click on the live widget is handled at once, even while a cell blocks on the launch.

JupyterLab ≥ 4.4 and Notebook 7.4 send comm messages to a kernel subshell (ipykernel ≥ 7): a
thread of the kernel's own, free while the main shell runs the cell that waits on a launch.
ipykernel 7.4 then re-routes a comm's incoming messages to the subshell of the last message that
comm *sent*, so that an async cell awaiting a widget's reply gets it. The launch widget is
updated from the launcher's thread on behalf of the waiting cell (the main shell), so without
help every click would queue behind that cell (and be dropped with the widget when the launch
ends). ``handle_where_sent`` keeps a comm's messages on the subshell the front end chose.

Only for the widget's buttons and chart controls. The sidebar's settings must reach the kernel before a cell run right
after them, which the main shell's one queue guarantees and a subshell does not, and a message handled on a subshell
during a cell reads as "Idle" in the status bar: ``handle_on_main_shell`` keeps all of the sidebar's messages there,
also after its comm was opened on a subshell that is gone since.

Front ends without subshells (Colab, VS Code, ipykernel 6) still deliver the message once the cell
ends; the widget's tooltips say so.

Examples:
    >>> import ipywidgets as w
    >>> button = w.Button(description="Stop")
    >>> handle_where_sent(button)
    >>> button.close()
"""

from __future__ import annotations

from typing import Any

__all__ = ["handle_where_sent", "handle_on_main_shell"]


def handle_where_sent(channel: Any) -> None:
    """Handle the messages of ``channel`` (a comm, or a widget's comm) on the subshell they arrive on;
    a no-op where ipykernel does not re-route comm messages."""
    comm = getattr(channel, "comm", channel)
    if comm is not None and hasattr(comm, "_reply_subshell_for"):
        comm._reply_subshell_for = _where_it_arrived


def handle_on_main_shell(channel: Any) -> None:
    """Handle the messages of ``channel`` on the main shell, in order with the cells, whatever
    subshell they arrive on. Without it ipykernel 7.4 sends them to the subshell of the last message
    ``channel`` sent, which may be one the front end has deleted since (its messages are then
    dropped). A no-op where ipykernel does not re-route comm messages.

    Example:
        >>> import comm
        >>> handle_on_main_shell(comm.create_comm(target_name="demo"))
    """
    if channel is not None and hasattr(channel, "_reply_subshell_for"):
        channel._reply_subshell_for = _on_main_shell


def _on_main_shell(data: Any, arrived_on: str | None) -> None:
    return None


def _where_it_arrived(data: Any, arrived_on: str | None) -> str | None:
    return arrived_on
