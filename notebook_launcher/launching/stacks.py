"""Where every rank is: the stacks ranks send when the kernel asks, read like faulthandler's dumps.

``Launch.stacks()`` returns a ``Stacks``: for each rank that answered, its threads and their frames
(outermost first), with notebook cells named as IPython names them ("Cell In[3], line 7").

Examples:
    >>> stacks = Stacks({1: {"pid": 42, "threads": [{"name": "MainThread", "main": True,
    ...     "frames": [["train.py", 7, "train", "dist.barrier()"]]}]}}, missing=[0])
    >>> print(stacks)
    rank 1 (pid 42), thread MainThread (most recent call last):
      File "train.py", line 7, in train
        dist.barrier()
    rank 0: no answer (it may be holding the GIL in C code, or it has ended)
    >>> stacks.where(1)
    'train (train.py, line 7): dist.barrier()'
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ..tracebacks import is_library

__all__ = ["Stacks", "where_they_were"]


def _where(filename: str) -> tuple[str, bool]:
    """A frame's file as IPython names it ("Cell In[3]"), and whether that is a notebook cell."""
    from ..devices.cuda_init_site import cell_name

    cell = cell_name(filename)
    return (cell, True) if cell else (filename, False)


def _with_cell_lines(report: dict) -> dict:
    """``report`` with the code of notebook-cell frames the rank could not read filled in from this
    kernel's cells (a spawned rank, or one on another node, has no copy of them)."""
    import linecache

    for thread in report.get("threads", []):
        for frame in thread.get("frames", []):
            if not frame[3] and _where(frame[0])[1]:
                frame[3] = linecache.getline(frame[0], frame[1]).strip()
    return report


class Stacks(Mapping):
    """rank -> {"pid", "threads": [{"name", "main", "frames": [[file, line, function, code]]}]}."""

    def __init__(
        self, by_rank: dict[int, dict], missing: list[int] | tuple[int, ...] = (), taken_at: float | None = None
    ) -> None:
        self._by_rank = {rank: _with_cell_lines(report) for rank, report in sorted(by_rank.items())}
        self.missing = sorted(missing)
        self.taken_at = taken_at  # time.time() of the request

    def __getitem__(self, rank: int) -> dict:
        return self._by_rank[rank]

    def __iter__(self) -> Iterator[int]:
        return iter(self._by_rank)

    def __len__(self) -> int:
        return len(self._by_rank)

    def text(self, rank: int) -> str:
        """One rank's threads, innermost frame last (as Python prints a traceback)."""
        report = self._by_rank[rank]
        parts = []
        for thread in report["threads"]:
            lines = [f"rank {rank} (pid {report['pid']}), thread {thread['name']} (most recent call last):"]
            for filename, lineno, function, code in thread["frames"]:
                where, cell = _where(filename)
                lines.append(
                    f"  {where}, line {lineno}, in {function}"
                    if cell
                    else f'  File "{where}", line {lineno}, in {function}'
                )
                if code:
                    lines.append(f"    {code}")
            parts.append("\n".join(lines))
        return "\n".join(parts)

    def where(self, rank: int) -> str:
        """The innermost frame of the rank's main thread in the user's code (else the innermost at all)."""
        report = self._by_rank[rank]
        main = next(
            (t for t in report["threads"] if t.get("main")), report["threads"][0] if report["threads"] else None
        )
        if main is None or not main["frames"]:
            return "no frames"
        frames = main["frames"]
        own = [frame for frame in frames if not is_library(frame[0])]
        filename, lineno, function, code = (own or frames)[-1]
        where, _ = _where(filename)
        return f"{function} ({where}, line {lineno})" + (f": {code}" if code else "")

    def __str__(self) -> str:
        parts = [self.text(rank) for rank in self._by_rank]
        parts += [
            f"rank {rank}: no answer (it may be holding the GIL in C code, or it has ended)" for rank in self.missing
        ]
        return "\n".join(parts)

    def __repr__(self) -> str:
        return str(self)

    def summary(self) -> str:
        """One line per rank: where it is."""
        lines = [f"rank {rank}: in {self.where(rank)}" for rank in self._by_rank]
        lines += [f"rank {rank}: no answer" for rank in self.missing]
        return "\n".join(lines)

    def as_builtins(self) -> dict[str, Any]:
        return {"stacks": {str(rank): report for rank, report in self._by_rank.items()}, "missing": self.missing}


def where_they_were(stacks: Stacks | None) -> str:
    """The end of an error message that says where each rank was ("" without stacks).

    Examples:
        >>> report = {"pid": 42, "threads": [{"name": "MainThread", "main": True,
        ...     "frames": [["train.py", 7, "train", "dist.barrier()"]]}]}
        >>> print(where_they_were(Stacks({1: report}, missing=[0])))
        ; where the ranks were:
        rank 1: in train (train.py, line 7): dist.barrier()
        rank 0: no answer
        >>> where_they_were(None)
        ''
    """
    return f"; where the ranks were:\n{stacks.summary()}" if stacks else ""
