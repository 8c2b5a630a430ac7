"""``%dist`` and ``%%dist``: persistent workers from notebook cells (``%load_ext notebook_launcher``).

    %dist start 2 [--spawn] [--backend gloo|nccl|none] [--display text]
                                               start 2 workers (fork by default)
    %%dist [--ranks 0,1]                       run this cell on every worker (or those ranks)
    %dist status                               the workers and their ranks
    %dist stop                                 end them

A ``%%dist`` cell shows what the ranks print as a launch does (the live widget with a tab per rank
while it runs, then the static form the notebook keeps; ``--display text`` for ``[rank N]``
lines), then each rank's value of the cell's last expression; a rank's exception is raised with
the cell's own line numbers.

Examples:
    >>> parse_start("2 --spawn --backend gloo")
    {'num_processes': 2, 'start_method': 'spawn', 'backend': 'gloo'}
    >>> parse_ranks("--ranks 0,1")
    [0, 1]
"""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any

from ..choices import DISPLAYS
from ..frontend.views.text import line_prefix
from .starting import current_workers, start_workers, why_none_run

__all__ = ["register", "parse_start", "parse_ranks"]

USAGE = (
    "usage: %dist start N [--spawn] [--backend auto|gloo|nccl|none] [--display auto|widget|text|none] | %dist status"
    " | %dist stop | %%dist [--ranks 0,1]"
)


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise ValueError(f"{message}; {USAGE}")


def parse_start(line: str) -> dict:
    """The ``start_workers`` arguments of ``%dist start ...``."""
    parser = _Parser(prog="%dist start", add_help=False)
    parser.add_argument("num_processes", type=int, nargs="?")
    parser.add_argument("--spawn", action="store_true")
    parser.add_argument("--fork", action="store_true")
    parser.add_argument("--backend")
    parser.add_argument("--display", choices=DISPLAYS)
    args = parser.parse_args(shlex.split(line))
    options: dict = {"num_processes": args.num_processes}
    if args.display:
        options["display"] = args.display
    if args.spawn or args.fork:
        options["start_method"] = "spawn" if args.spawn else "fork"
    if args.backend:
        options["backend"] = args.backend
    return options


def parse_ranks(line: str) -> list[int] | None:
    """The ranks of ``%%dist --ranks 0,1`` (None: every rank)."""
    parser = _Parser(prog="%%dist", add_help=False)
    parser.add_argument("--ranks")
    args = parser.parse_args(shlex.split(line))
    if args.ranks is None:
        return None
    try:
        return [int(rank) for rank in args.ranks.split(",") if rank.strip()]
    except ValueError:
        raise ValueError(f"--ranks takes rank numbers separated by commas, got {args.ranks!r}") from None


def dist(line: str, cell: str | None = None):
    """The ``%dist`` line magic and the ``%%dist`` cell magic."""
    if cell is not None:
        return _run_cell(line, cell)
    command, _, rest = line.strip().partition(" ")
    if command == "start":
        running = current_workers()
        if running is not None:
            raise RuntimeError(f"workers are running already ({running!r}); %dist stop ends them")
        workers = start_workers(**parse_start(rest))
        method = workers.launch.plan.start_method
        print(f"{len(workers.ranks)} workers started ({method}); run cells on them with %%dist")
        return None
    if command in ("stop", "status"):
        found = current_workers()
        if found is None:
            print(f"{why_none_run()}; %dist start N starts new ones")
            return None
        if command == "stop":
            found.stop()
        print(_describe(found))
        return None
    raise ValueError(USAGE)


def _describe(workers) -> str:
    status = workers.launch.rank_status
    ranks = ", ".join(f"rank {rank}: pid {pid} {status(rank)}" for rank, pid in workers.pids.items())
    return f"workers {workers.launch.id}: {workers.status}; {ranks}"


def _run_cell(line: str, cell: str) -> None:
    workers = current_workers()
    if workers is None:
        raise RuntimeError(f"{why_none_run()}; start new ones with %dist start N")
    ranks = parse_ranks(line)
    filename, first_line = _cell_file(line, cell)
    values = workers.exec(cell, ranks, filename=filename, first_line=first_line, show=True)
    template = workers.launch.plan.log_line_prefix
    for rank, text in zip(workers._ranks_of(ranks), values, strict=True):
        if text is not None:
            prefix = line_prefix(template, rank)
            print(prefix + text.replace("\n", "\n" + prefix))


def _cell_file(line: str, cell: str) -> tuple[str | None, int]:
    """A file name for the ranks to compile the cell's body under, and the line it starts on (2:
    below the ``%%dist`` line). IPython shows it as the running cell ("Cell In[N]") with the lines
    the user wrote: the cell's own file holds the line IPython made of the magic
    (``get_ipython().run_cell_magic(...)``), so the cell is registered again as written."""
    from IPython import get_ipython

    compiler: Any = getattr(get_ipython(), "compile", None)
    cells = getattr(compiler, "_filename_map", {})
    frame: Any = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename in cells:
            written = f"%%dist {line}".rstrip() + f"\n{cell}"
            try:
                return compiler.cache(written, cells[frame.f_code.co_filename], raw_code=written + "\n"), 2
            except (AttributeError, TypeError):  # an IPython without this cache: its own file, as made
                return frame.f_code.co_filename, 2
        frame = frame.f_back
    return None, 2


def register(ipython) -> None:
    """Make ``%dist`` / ``%%dist`` available in ``ipython``."""
    ipython.register_magic_function(lambda line: dist(line), "line", "dist")
    ipython.register_magic_function(lambda line, cell: dist(line, cell), "cell", "dist")
