"""Pickling by value (cloudpickle) that keeps the file each function was written in.

Functions and classes defined in cells travel to spawned, start-server, worker and cluster ranks by
value. Since cloudpickle 3.1.3, the code of every function pickled so is renamed "<dynamic-code>",
so a rank's traceback and stacks would read ``File "<dynamic-code>", line 7`` where they read
``Cell In[3], line 7`` (the kernel names a cell by its file). This pickler puts each code object's
own file name back; with earlier cloudpickle it changes nothing.

Examples:
    >>> import pickle
    >>> scope = {}
    >>> exec(compile("def train():\\n    return 1\\n", "/tmp/ipykernel_1/123.py", "exec"), scope)
    >>> pickle.loads(dumps(scope["train"])).__code__.co_filename
    '/tmp/ipykernel_1/123.py'
"""

from __future__ import annotations

import io
import types
from collections import ChainMap
from typing import Any, ClassVar

import cloudpickle

__all__ = ["Pickler", "dumps"]

_RENAMED = "<dynamic-code>"


def _code_keeping_its_file(code: types.CodeType) -> Any:
    rebuild, arguments = cloudpickle.Pickler.dispatch_table[types.CodeType](code)
    return rebuild, tuple(code.co_filename if argument == _RENAMED else argument for argument in arguments)


class Pickler(cloudpickle.Pickler):
    """``cloudpickle.Pickler`` whose code objects keep their ``co_filename``."""

    dispatch_table: ClassVar[ChainMap] = ChainMap(
        {types.CodeType: _code_keeping_its_file}, cloudpickle.Pickler.dispatch_table
    )


def dumps(value: Any, protocol: int | None = None) -> bytes:
    """``cloudpickle.dumps(value)``, keeping the file names of the code it pickles."""
    buffer = io.BytesIO()
    Pickler(buffer, protocol=protocol).dump(value)
    return buffer.getvalue()
