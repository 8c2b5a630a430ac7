"""A rank's traceback, carried to the kernel and rebuilt there as a real traceback object.

In the rank, ``frames_of`` lists each frame as builtins (file, function, first line, line, and
whether it is library code). In the kernel, ``traceback_from`` turns that list back into a chain of
real traceback entries: each is made by running a one-instruction stub compiled under the frame's
file name and function name, padded so that its code object starts at the function's real first
line and raises at the frame's line. IPython then shows the rank's frames exactly as it shows
local ones — "Cell In[3], line 7" with the source lines around it, since the kernel has every
cell's source, for forked and spawned ranks alike — and folds library frames, which are marked
``__tracebackhide__``, into "[... skipping hidden N frame]".

Examples:
    >>> def fails():
    ...     raise ValueError("boom")
    >>> try:
    ...     fails()
    ... except ValueError as err:
    ...     frames = frames_of(err.__traceback__)
    >>> rebuilt = traceback_from(frames)
    >>> import traceback
    >>> [(entry.name, entry.line) for entry in traceback.extract_tb(rebuilt)][-1]
    ('fails', 'raise ValueError("boom")')
"""

from __future__ import annotations

import os
import sys
import sysconfig
from types import TracebackType
from typing import Any

__all__ = ["frames_of", "traceback_from", "repeats_note", "shown_as", "library_dirs", "is_library"]


def library_dirs() -> tuple[str, ...]:
    """Where library code lives: the standard library, site-packages, this package and trainer_core."""
    paths = {sysconfig.get_paths()[name] for name in ("stdlib", "platstdlib", "purelib", "platlib")}
    package = os.path.dirname(os.path.abspath(__file__))
    return (*sorted(paths), package, os.path.join(os.path.dirname(package), "trainer_core"))


REPEATS_KEPT = 3  # frames of a run of the same line kept, as Python's own tracebacks keep them


def frames_of(tb: TracebackType | None) -> list[dict]:
    """The frames of ``tb``, outermost first, as builtins.

    A run of frames at the same line (a recursion) keeps its first ``REPEATS_KEPT``; the last kept
    one says how many more there were (``"repeated"``), as Python's "[Previous line repeated N more
    times]" does, so a RecursionError's thousand frames travel and show as a handful.
    """
    library = library_dirs()
    frames: list[dict] = []
    run = 0
    while tb is not None:
        code = tb.tb_frame.f_code
        path = code.co_filename
        lineno = tb.tb_lineno or code.co_firstlineno
        tb = tb.tb_next
        last = frames[-1] if frames else None
        if last is not None and (last["filename"], last["name"], last["lineno"]) == (path, code.co_name, lineno):
            run += 1
            if run >= REPEATS_KEPT:
                last["repeated"] = last.get("repeated", 0) + 1
                continue
        else:
            run = 0
        frames.append(
            {
                "filename": path,
                "name": code.co_name,
                "firstlineno": code.co_firstlineno,
                "lineno": lineno,
                "library": path.startswith("<frozen") or os.path.abspath(path).startswith(library),
            }
        )
    return frames


def repeats_note(frames: list[dict]) -> str | None:
    """A line for the frames ``frames_of`` left out of a recursion, or None when none were.

    Examples:
        >>> repeats_note([{"filename": "<cell>", "name": "f", "lineno": 2, "repeated": 994}])
        "[the rank's frame f at <cell>:2 repeated 994 more times]"
    """
    notes = [
        f"[the rank's frame {frame['name']} at {frame['filename']}:{frame['lineno']} repeated"
        f" {frame['repeated']} more times]"
        for frame in frames
        if frame.get("repeated")
    ]
    return "\n".join(notes) or None


def shown_as(exc: BaseException, frames: TracebackType | None = None, line: str | None = None) -> BaseException:
    """Have IPython show ``exc`` in a cell with only ``frames`` (a rank's), or as the one ``line``.

    Raised from the launcher, an exception gathers the launcher's frames (and a cell magic's
    ``run_cell_magic`` line) on its way out; IPython's ``_render_traceback_`` protocol lets the
    exception say how it is shown instead, so a cell shows the user's own lines and nothing of ours.
    Elsewhere (plain Python) it is shown as usual. Returns ``exc``.

    Examples:
        >>> err = shown_as(KeyboardInterrupt("stopped"), line="KeyboardInterrupt: stopped")
        >>> err._render_traceback_()
        ['KeyboardInterrupt: stopped']
    """

    while frames is not None and frames.tb_frame.f_locals.get("__tracebackhide__"):
        frames = frames.tb_next  # the launcher's and libraries' frames the rank went through first

    def render() -> list[str]:
        if line is not None:
            return [line]
        ipython = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
        if ipython is None:
            import traceback

            return traceback.format_exception(type(exc), exc, frames)
        return ipython.InteractiveTB.structured_traceback(type(exc), exc, frames)

    try:
        exc._render_traceback_ = render  # type: ignore[attr-defined]
    except AttributeError:  # an exception type without a __dict__: shown as usual
        pass
    return exc


def is_library(path: str) -> bool:
    """True for a file of library code (``library_dirs``) or a frozen module."""
    return path.startswith("<frozen") or os.path.abspath(path).startswith(library_dirs())


class _Marker(Exception):
    pass


def traceback_from(frames: list[dict]) -> TracebackType | None:
    """A real traceback whose entries have the files, functions and lines of ``frames``."""
    head: TracebackType | None = None
    previous: TracebackType | None = None
    for frame in frames:
        entry = _entry(frame)
        if entry is None:
            continue
        if previous is None:
            head = entry
        else:
            previous.tb_next = entry
        previous = entry
    return head


def _entry(frame: dict) -> TracebackType | None:
    first = max(1, min(frame["firstlineno"], frame["lineno"]))
    padding = "\n" * (frame["lineno"] - first)
    try:
        stub = compile(padding + "raise __marker__", frame["filename"], "exec")
        code = stub.replace(co_name=frame["name"], co_firstlineno=first)
    except (SyntaxError, ValueError, TypeError):
        return None
    hidden: dict[str, Any] = {"__tracebackhide__": True} if frame["library"] else {}
    namespace = {"__name__": "__main__", "__file__": frame["filename"], "__marker__": _Marker}
    try:
        exec(code, namespace, hidden)
    except _Marker:
        return sys.exc_info()[2].tb_next  # type: ignore[union-attr]  # the stub's own entry
    return None
