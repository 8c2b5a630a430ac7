"""A failed rank's exception, also catchable as torch elastic's ``ChildFailedError``.

Accelerate's ``notebook_launcher`` goes through torch elastic, which raises ``ChildFailedError``
when a rank fails, so code written for it says ``except ChildFailedError``. The launcher raises the
rank's own exception instead (its type, message and frames). Both work: the exception raised is an
instance of a class made from the rank's exception type and ``ChildFailedError``, named as that
type, so ``except RuntimeError`` and ``except ChildFailedError`` both catch it, the cell still
shows ``RuntimeError: [rank 0] ...``, and it pickles as the rank's type. Only
``type(err) is RuntimeError`` tells them apart.

Examples:
    >>> from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    >>> err = also_child_failed(RuntimeError("[rank 1] boom"), rank=1, name="train")
    >>> isinstance(err, RuntimeError), isinstance(err, ChildFailedError), type(err).__name__, str(err)
    (True, True, 'RuntimeError', '[rank 1] boom')
    >>> err.name, sorted(err.failures)
    ('train', [1])
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["also_child_failed"]

# what a built-in exception keeps outside its args and __dict__ (its __new__ sets them, not run here)
_FIELDS = (
    (OSError, ("errno", "strerror", "filename", "filename2")),
    (ImportError, ("name", "path")),
    (AttributeError, ("name", "obj")),
    (NameError, ("name",)),
)


def also_child_failed(exc: BaseException, rank: int | None, name: str) -> BaseException:
    """``exc`` as an instance of its type and of ``ChildFailedError`` (``rank``'s failure of the
    function ``name``); ``exc`` itself when it cannot be (not an ``Exception``, no torch elastic,
    a type that cannot be subclassed or made without its ``__init__``)."""
    if not isinstance(exc, Exception):
        return exc
    try:
        from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure
    except Exception:
        return exc
    if isinstance(exc, ChildFailedError):
        return exc
    try:
        kind: Any = type(exc)
        combined = _combined(kind, ChildFailedError)
        twin = combined.__new__(combined, *exc.args)
        twin.args = exc.args
        twin.__dict__.update(vars(exc))
        kept = [field for base, fields in _FIELDS if isinstance(exc, base) for field in fields]
        for field in kept:
            if getattr(exc, field, None) is not None:
                setattr(twin, field, getattr(exc, field))
        twin.__cause__, twin.__context__ = exc.__cause__, exc.__context__
        twin.__suppress_context__ = exc.__suppress_context__
    except Exception:
        return exc
    if getattr(twin, "name", None) is None:  # an AttributeError or ImportError keeps its own
        twin.name = name
    # what torch elastic records of a failed process; the rank's pid and error file are not kept here
    twin.failures = {} if rank is None else {rank: ProcessFailure(local_rank=rank, pid=-1, exitcode=1, error_file="")}
    return twin.with_traceback(exc.__traceback__)


@functools.cache
def _combined(kind: Any, child_failed: Any) -> Any:
    """The subclass of ``kind`` and ``child_failed``, named and pickled as ``kind``."""

    def __reduce__(self: Any) -> Any:
        reduced = super(combined, self).__reduce__()
        if isinstance(reduced, tuple) and reduced and reduced[0] is combined:
            return (kind, *reduced[1:])
        return reduced

    namespace = {"__module__": kind.__module__, "__qualname__": kind.__qualname__, "__reduce__": __reduce__}
    combined: Any = type(kind.__name__, (kind, child_failed), namespace)
    return combined
