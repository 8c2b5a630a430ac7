"""A rank's return value, pickled so that the kernel gets its own classes back, tensors on a GPU
(or any device but the CPU) arrive on the CPU, and large tensors travel through shared memory.

A GPU tensor unpickled in the kernel would initialise CUDA there, and every later launch would have
to spawn instead of fork ("CUDA was initialized in this kernel by threading.py"): returning
``model.state_dict()`` from a GPU rank is the common case. So a rank sends its device tensors as
CPU tensors (a ``Parameter`` stays a ``Parameter``); ``.cuda()`` in the kernel puts them back.

Examples:
    >>> pickle.loads(dumps_for_kernel({"loss": 0.5}))
    {'loss': 0.5}
"""

from __future__ import annotations

import functools
import io
import pickle
import sys
from typing import Any

from .shared_tensors import TensorSharer

__all__ = ["dumps_for_kernel", "new_sharer", "set_tensor_prefix"]

# values that hold no tensor and no class of the kernel's: the standard pickler alone, made at once
_PLAIN = frozenset({type(None), bool, int, float, complex, str, bytes})

_prefix: str | None = None  # where this rank writes shared tensors (set by the rank bootstrap)


def set_tensor_prefix(prefix: str | None) -> None:
    """Have ``dumps_for_kernel`` in this process share large tensors under ``prefix`` (None: never)."""
    global _prefix
    _prefix = prefix


def new_sharer() -> TensorSharer | None:
    """A sharer of large tensors for one value (None outside a rank: nothing is shared)."""
    return TensorSharer(_prefix) if _prefix is not None else None


def dumps_for_kernel(value: Any, share_tensors: bool = True, sharer: TensorSharer | None = None) -> bytes:
    """Pickle ``value`` so the kernel gets back instances of *its own* classes.

    By reference first: under fork a class defined in a notebook cell is the kernel's very class,
    and the standard pickler checks the reference resolves to it. Otherwise (spawn, or classes made
    inside the function) by value with cloudpickle, whose class tracker maps classes the kernel sent
    by value back to the kernel's originals. In a rank, CPU tensors of 1 MiB and more go through
    shared memory (``shared_tensors``) unless ``share_tensors`` is False; ``sharer`` (see
    ``new_sharer``) lets several picklings of one value share its files.

    Examples:
        >>> pickle.loads(dumps_for_kernel({"loss": 0.5}))
        {'loss': 0.5}
    """
    if type(value) in _PLAIN:  # most functions return None: no sharer or pickler of ours to make
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    if sharer is None and share_tensors:
        sharer = new_sharer()
    try:
        return _dumps(pickle.Pickler, value, sharer)
    except Exception:
        from .by_value import Pickler

        return _dumps(Pickler, value, sharer)


def _dumps(base: type, value: Any, sharer: TensorSharer | None) -> bytes:
    buffer = io.BytesIO()
    pickler = _sharing(base)(buffer, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.share = sharer.reduce if sharer is not None else None
    pickler.dump(value)
    return buffer.getvalue()


@functools.cache
def _sharing(base: type) -> type:
    """``base`` with device tensors sent as CPU tensors and large tensors reduced by a
    ``TensorSharer`` (set as ``share`` on each pickler; None: none shared).

    Made once per base, the standard pickler's in the kernel at import: a class made in a forked
    rank costs it more than pickling a small value (each object it touches is a copied page)."""

    class SharingPickler(base):
        share: Any = None

        def reducer_override(self, obj: Any) -> Any:
            reduced = _on_host(obj)
            if reduced is NotImplemented and self.share is not None:
                reduced = self.share(obj)
            if reduced is not NotImplemented:
                return reduced
            parent = getattr(super(), "reducer_override", None)
            return parent(obj) if parent is not None else NotImplemented

    return SharingPickler


def _on_host(obj: Any) -> Any:
    """A tensor on a device other than the CPU, reduced to its CPU copy; else ``NotImplemented``."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(obj, torch.Tensor) or obj.device.type in ("cpu", "meta"):
        return NotImplemented
    host = obj.detach().to("cpu")
    if isinstance(obj, torch.nn.Parameter):
        host = torch.nn.Parameter(host, requires_grad=obj.requires_grad)
    elif obj.requires_grad and obj.is_leaf:
        host.requires_grad_(True)
    return _same, (host,)  # the CPU copy is pickled in turn: shared when large


def _same(value: Any) -> Any:
    return value


_sharing(pickle.Pickler)
