"""Pickling by value (cloudpickle) that keeps the file each function was written in.

Functions and classes defined in cells travel to spawned, start-server, worker and cluster ranks by
value. Since cloudpickle 3.1.3, the code of every function pickled so is renamed "<dynamic-code>",
so a rank's traceback and stacks would read ``File "<dynamic-code>", line 7`` where they read
``Cell In[3], line 7`` (the kernel names a cell by its file). This pickler puts each code object's
own file name back; with earlier cloudpickle it changes nothing.

The notebook's IPython shell never travels: ``exit``/``quit`` (the shell's, which only ask an
interactive shell to close) travel as a script's ``exit``, which ends the rank as ``sys.exit()``
does, and anything else that reaches the shell (``get_ipython()``, a ``!command``, a ``%magic``) is
refused by name instead of failing deep inside it ("cannot pickle 'sqlite3.Connection'").

Examples:
    >>> import pickle
    >>> scope = {}
    >>> exec(compile("def train():\\n    return 1\\n", "/tmp/ipykernel_1/123.py", "exec"), scope)
    >>> pickle.loads(dumps(scope["train"])).__code__.co_filename
    '/tmp/ipykernel_1/123.py'
"""

from __future__ import annotations

import io
import pickle
import sys
import types
from collections import ChainMap
from typing import Any, ClassVar

import cloudpickle

from .script_exit import ScriptExit, shells_exit

__all__ = ["Pickler", "dumps", "SHELL_REFUSED"]

SHELL_REFUSED = (
    "the notebook's IPython shell cannot go to a rank that does not fork the kernel (get_ipython(), a"
    " !command or a %magic in the function reaches it): run commands with subprocess, or use"
    " start_method='fork'"
)

_RENAMED = "<dynamic-code>"


def _code_keeping_its_file(code: types.CodeType) -> Any:
    rebuild, arguments = cloudpickle.Pickler.dispatch_table[types.CodeType](code)
    return rebuild, tuple(code.co_filename if argument == _RENAMED else argument for argument in arguments)


def _is_shell(value: Any) -> bool:
    interactive = sys.modules.get("IPython.core.interactiveshell")
    return interactive is not None and isinstance(value, interactive.InteractiveShell)


class Pickler(cloudpickle.Pickler):
    """``cloudpickle.Pickler`` whose code objects keep their ``co_filename``, which sends the
    shell's ``exit`` as a script's and refuses the shell itself."""

    dispatch_table: ClassVar[ChainMap] = ChainMap(
        {types.CodeType: _code_keeping_its_file}, cloudpickle.Pickler.dispatch_table
    )

    def reducer_override(self, obj: Any) -> Any:
        name = shells_exit(obj)
        if name is not None:
            return ScriptExit, (name,)
        if _is_shell(obj):
            raise pickle.PicklingError(SHELL_REFUSED)
        return super().reducer_override(obj)


def dumps(value: Any, protocol: int | None = None) -> bytes:
    """``cloudpickle.dumps(value)``, keeping the file names of the code it pickles."""
    buffer = io.BytesIO()
    Pickler(buffer, protocol=protocol).dump(value)
    return buffer.getvalue()
