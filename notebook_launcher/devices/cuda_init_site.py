"""Remember where CUDA was first initialized in this kernel, so a fork error can name the cell.

``install()`` wraps ``torch._C._cuda_init``, the one call every lazy CUDA initialization goes
through (``torch.cuda._lazy_init`` looks it up at call time, and tensors created on a CUDA device
call ``_lazy_init``), and ``torch._C._cuda_getDeviceCount``, through which
``torch.cuda.is_available()`` starts the CUDA driver when it does not count through NVML. Each
wrapper records its first call's stack as "Cell In[3], line 2: <code>" (and, when a library made
the call, the library's line after an arrow: "Cell In[2], line 1: import torchao → torchao/x.py,
line 9: torch.cuda.init()"), then calls through. On a CPU-only build there is nothing to wrap.

Examples:
    >>> record = recording(lambda: None)   # what install() puts around torch._C._cuda_init
    >>> record()
    >>> first_site() is not None
    True

``install_when_imported()`` does it now if torch is loaded, else right after torch is imported, so
importing this package stays cheap (a spawned rank that never uses torch never loads it). It also
wraps torch_tpu's lazy initialization (``torch.tpu._lazy_init``) once torch_tpu is imported: its
first call is recorded as "tpu", the site a refused TPU launch names.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any

from ..import_hooks import after_import

_OWN_DIRS = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))),)  # the whole package
_TORCH = f"{os.sep}torch{os.sep}"
_WRAPPED = {"_cuda_init": "init", "_cuda_getDeviceCount": "driver"}  # torch._C function -> what it records
_first_sites: dict[str, str | None] = {}


def first_site(what="init"):
    """Where CUDA was first initialized ("Cell In[3], line 2: x.cuda()"), or None if unknown;
    ``what="driver"``: where the CUDA driver was first started by counting GPUs through it."""
    return _first_sites.get(what)


def recording(original, what="init"):
    """Wrap ``original`` so that its first call records the caller's user-code frame as ``what``."""

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        if what not in _first_sites:
            import traceback

            _first_sites[what] = _describe(traceback.extract_stack()[:-1])
        return original(*args, **kwargs)

    wrapper.__notebook_launcher_recording__ = True  # type: ignore[attr-defined]
    return wrapper


def install():
    """Wrap ``torch._C._cuda_init`` and ``_cuda_getDeviceCount`` once; a no-op without CUDA
    support or when already wrapped."""
    compiled: Any = getattr(sys.modules.get("torch"), "_C", None)
    for name, what in _WRAPPED.items():
        original = getattr(compiled, name, None)
        if original is not None and not getattr(original, "__notebook_launcher_recording__", False):
            setattr(compiled, name, recording(original, what))


def install_tpu():
    """Wrap ``torch.tpu._lazy_init`` (torch_tpu's) once; a no-op without torch_tpu."""
    tpu: Any = getattr(sys.modules.get("torch"), "tpu", None)
    original = getattr(tpu, "_lazy_init", None)
    if original is not None and not getattr(original, "__notebook_launcher_recording__", False):
        tpu._lazy_init = recording(original, "tpu")


def install_when_imported():
    """``install()`` now if torch is imported, else as soon as ``import torch`` finishes; and
    ``install_tpu()`` once torch_tpu is imported (torch imports it, through its backend autoload)."""
    after_import("torch", lambda _module: install())
    after_import("torch_tpu", lambda _module: install_tpu())


def _describe(stack):
    """ "Cell In[3], line 2: <code>", with "→ <library file>, line N: <code>" after it when the
    innermost caller outside torch and this package is not the cell (a library imported there)."""
    cell = next((frame for frame in reversed(stack) if cell_name(frame.filename)), None)
    caller = next((frame for frame in reversed(stack) if _outside_torch(frame.filename)), None)
    first = cell or caller
    if first is None:
        return None
    parts = [_line(first, cell_name(first.filename) or first.filename)]
    if cell is not None and caller is not None and caller is not cell:
        parts.append(_line(caller, _short_path(caller.filename)))
    return " → ".join(parts)


def _line(frame, where):
    code = f": {frame.line.strip()}" if frame.line else ""
    return f"{where}, line {frame.lineno}{code}"


def _outside_torch(filename):
    path = os.path.abspath(filename)
    return not path.startswith(_OWN_DIRS) and _TORCH not in path and not filename.startswith("<frozen ")


def _short_path(filename):
    """A library's file from its package folder on ("torchao/quantization/utils.py")."""
    for marker in ("site-packages", "dist-packages"):
        _, found, tail = filename.rpartition(f"{os.sep}{marker}{os.sep}")
        if found:
            return tail
    return filename


def cell_name(filename):
    """IPython's "Cell In[N]" name for a cell's code file, or None outside IPython / other files."""
    ipython = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    compiler = getattr(ipython, "compile", None)
    if compiler is None or not hasattr(compiler, "format_code_name"):
        return None
    named = compiler.format_code_name(filename)
    return " ".join(named) if named else None
