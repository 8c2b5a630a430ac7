"""A script's ``exit``, for the notebook's: IPython's ``exit``/``quit`` only ask an interactive shell
to close, which a rank is not. Light (the standard library only), so a forked rank uses it without
importing anything.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["ScriptExit", "shells_exit"]


class ScriptExit:
    """A script's ``exit``/``quit``: calling it ends the process as ``sys.exit(code)`` does.

    Examples:
        >>> ScriptExit("exit")(3)
        Traceback (most recent call last):
        SystemExit: 3
    """

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Use {self.name}() to end this rank"

    def __call__(self, code: Any = None) -> None:
        raise SystemExit(code)


def shells_exit(value: Any) -> str | None:
    """ "exit" or "quit" when ``value`` is IPython's autocalled exit object, else None."""
    autocall = sys.modules.get("IPython.core.autocall")
    if autocall is not None and isinstance(value, autocall.ExitAutocall):
        return "quit" if value is getattr(getattr(value, "_ip", None), "user_ns", {}).get("quit") else "exit"
    return None
