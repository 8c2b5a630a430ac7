"""Remember where CUDA was first initialized in this kernel, so a fork error can name the cell.

``install()`` wraps ``torch._C._cuda_init``, the one call every lazy CUDA initialization goes
through (``torch.cuda._lazy_init`` looks it up at call time, and tensors created on a CUDA device
call ``_lazy_init``). The wrapper records the first call's stack as "Cell In[3], line 2: <code>"
and then initializes CUDA as before. On a CPU-only build there is nothing to wrap.

Examples:
    >>> record = recording(lambda: None)   # what install() puts around torch._C._cuda_init
    >>> record()
    >>> first_site() is not None
    True

``install_when_imported()`` does it now if torch is loaded, else right after torch is imported, so
importing this package stays cheap (a spawned rank that never uses torch never loads it).
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any

from ..import_hooks import after_import

_first_site = None
_OWN_DIRS = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))),)  # the whole package


def first_site():
    """Where CUDA was first initialized ("Cell In[3], line 2: x.cuda()"), or None if unknown."""
    return _first_site


def recording(original):
    """Wrap ``original`` so that its first call records the caller's user-code frame."""

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        global _first_site
        if _first_site is None:
            import traceback

            _first_site = _describe(traceback.extract_stack()[:-1])
        return original(*args, **kwargs)

    wrapper.__notebook_launcher_recording__ = True  # type: ignore[attr-defined]
    return wrapper


def install():
    """Wrap ``torch._C._cuda_init`` once; a no-op without CUDA support or when already wrapped."""
    torch: Any = sys.modules.get("torch")
    init = getattr(getattr(torch, "_C", None), "_cuda_init", None)
    if init is None or getattr(init, "__notebook_launcher_recording__", False):
        return
    torch._C._cuda_init = recording(init)


def install_when_imported():
    """``install()`` now if torch is imported, else as soon as ``import torch`` finishes."""
    after_import("torch", lambda _module: install())


def _describe(stack):
    frame = _user_frame(stack)
    if frame is None:
        return None
    where = cell_name(frame.filename) or frame.filename
    code = f": {frame.line.strip()}" if frame.line else ""
    return f"{where}, line {frame.lineno}{code}"


def _user_frame(stack):
    """The innermost frame in user code: a notebook cell if any, else outside torch and us."""
    for frame in reversed(stack):
        if cell_name(frame.filename):
            return frame
    for frame in reversed(stack):
        path = os.path.abspath(frame.filename)
        if not path.startswith(_OWN_DIRS) and f"{os.sep}torch{os.sep}" not in path:
            return frame
    return None


def cell_name(filename):
    """IPython's "Cell In[N]" name for a cell's code file, or None outside IPython / other files."""
    ipython = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    compiler = getattr(ipython, "compile", None)
    if compiler is None or not hasattr(compiler, "format_code_name"):
        return None
    named = compiler.format_code_name(filename)
    return " ".join(named) if named else None
