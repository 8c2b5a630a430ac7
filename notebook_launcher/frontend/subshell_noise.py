"""ipykernel's complaints about a subshell deleted under its messages go to the kernel's log, not into a cell.

JupyterLab ≥ 4.4 gives each comm target of a kernel a subshell (ipykernel ≥ 7) and deletes it when
that target's last comm closes: the end of a launch closes its widget, and with it, often, the
notebook's last widget. ipykernel 7.4 then drops the messages already on their way to that
subshell by destroying their asyncio tasks, and asyncio says so on ``sys.stderr``: "Task was
destroyed but it is pending! … ipykernel/utils.py … run_in_context", "Task exception was never
retrieved … UnknownSubshellError" and "RuntimeWarning: coroutine 'Kernel.shell_main' was never
awaited". ``sys.stderr`` is the running cell's output, so the launch's cell showed them in a pink
box (seen with two notebooks launching at once; made at will by deleting a subshell while requests
to it are queued, without this package).

The dropped messages were for closed widgets: nothing a person waits for. These records, and only
these (their text names ipykernel's own coroutines), go to the kernel's own log
(``sys.__stderr__``, the terminal or server log) in one line each; every other asyncio message, a
user's own pending task among them, is shown as before. The two warnings are ignored.

Example (in a kernel; installed when the package is imported there)::

    route_subshell_noise()
"""

from __future__ import annotations

import logging
import re
import sys
import warnings

__all__ = ["route_subshell_noise", "is_subshell_noise"]

# ipykernel's coroutines that carry a shell message to its (sub)shell, and the error of a deleted one
_IPYKERNEL_SHELL = re.compile(r"_async_in_context\.<locals>\.run_in_context|Kernel\.shell_main|UnknownSubshellError")
_NEVER_AWAITED = r"coroutine '(_async_in_context\.<locals>\.run_in_context|Kernel\.shell_main)' was never awaited"


def is_subshell_noise(message: str) -> bool:
    """Whether an asyncio log message is ipykernel dropping a shell message's task.

    Examples:
        >>> is_subshell_noise("Task was destroyed but it is pending!\\ntask: <Task pending "
        ...                   "coro=<_async_in_context.<locals>.run_in_context() running at ipykernel/utils.py:52>>")
        True
        >>> is_subshell_noise("Task was destroyed but it is pending!\\ntask: <Task pending coro=<train() running>>")
        False
    """
    return "ipykernel" in message and bool(_IPYKERNEL_SHELL.search(message))


class _ToKernelLog(logging.Filter):
    """Drops ipykernel's records from asyncio's logger, writing their first line to the kernel's log."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not is_subshell_noise(message):
            return True
        log = sys.__stderr__
        if log is not None:
            print(
                f"notebook_launcher: ipykernel dropped a deleted subshell's message: {message.splitlines()[0]}",
                file=log,
                flush=True,
            )
        return False


_installed: list[_ToKernelLog] = []


def route_subshell_noise() -> None:
    """Send ipykernel's messages about deleted subshells to the kernel's log (once)."""
    if _installed:
        return
    route = _ToKernelLog()
    logging.getLogger("asyncio").addFilter(route)
    warnings.filterwarnings("ignore", message=_NEVER_AWAITED, category=RuntimeWarning)
    _installed.append(route)
