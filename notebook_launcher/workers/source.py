"""Run a cell's source code in a namespace as IPython does: statements, then the last expression's value.

The code is compiled under the notebook cell's own file name, with its line numbers, and its text
is put in ``linecache``, so a traceback from a rank names "Cell In[N], line K" of the cell the user
wrote and shows its lines.

Examples:
    >>> namespace = {}
    >>> run_source("x = 20\\nx + 1", namespace, "<cell>")
    21
    >>> namespace["x"]
    20
"""

from __future__ import annotations

import ast
import linecache
from typing import Any

__all__ = ["run_source"]


def run_source(source: str, namespace: dict, filename: str, first_line: int = 1) -> Any:
    """Execute ``source`` in ``namespace``; return the value of its last line when that is an
    expression (None otherwise, or when the line ends with ``;``, as in IPython).

    ``first_line`` is the line of the cell on which ``source`` begins (2 below a ``%%dist`` line).
    """
    padded = "\n" * (first_line - 1) + source
    lines = padded.splitlines(keepends=True)
    linecache.cache[filename] = (len(padded), None, lines, filename)
    tree = ast.parse(padded, filename)
    last = tree.body[-1] if tree.body else None
    shown = isinstance(last, ast.Expr) and not source.rstrip().endswith(";")
    body = tree.body[:-1] if shown else tree.body
    exec(compile(ast.Module(body, type_ignores=[]), filename, "exec"), namespace)
    if shown:
        assert isinstance(last, ast.Expr)
        return eval(compile(ast.Expression(last.value), filename, "eval"), namespace)
    return None
