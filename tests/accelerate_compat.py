"""Hugging Face Accelerate's own multi-process test scripts as a compatibility suite for trainer_core.

Run by torchrun on every rank: ``torchrun --nproc_per_node 2 tests/accelerate_compat.py SCRIPT OUT
[--library trainer_core|accelerate] [-- SCRIPT ARGS...]``. The script is read from the installed
accelerate package and changed in these ways only, all on the syntax tree:

1. with ``--library trainer_core``, the name ``Accelerator`` is imported from ``trainer_core``
   instead of ``accelerate`` / ``accelerate.accelerator`` (every other name still comes from
   accelerate, as a user's code would keep them);
2. in ``main()``, each statement that calls one of the script's own test functions is wrapped so a
   failure is recorded and the next test runs; the tests themselves, and their assertions, are
   untouched;
3. in the scripts that download (``OFFLINE``), ``datasets.load_dataset`` and the ``evaluate``
   module are taken from ``accelerate_offline`` (MRPC-shaped data and metric; the test passes a
   tiny local BERT as the model).

Each rank appends one JSON line per test call to ``OUT.rank<N>``: the call as written, whether it
passed, the error, and whether it used trainer_core at all ("ours": an attribute of a trainer_core
Accelerator, its state or a prepared object was read during the call; a test of Accelerate's own
``PartialState`` or operations passes or fails whatever trainer_core does); then, once the script's
``main`` returned, ``{"ended": SCRIPT}`` (a release of Accelerate that adds test calls to a script
needs no change to the suite, and a rank that died part-way is told apart).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import sys
import traceback

SCRIPTS = {
    "test_script": "accelerate/test_utils/scripts/test_script.py",
    "test_sync": "accelerate/test_utils/scripts/test_sync.py",
    "test_ops": "accelerate/test_utils/scripts/test_ops.py",
    "test_distributed_data_loop": "accelerate/test_utils/scripts/test_distributed_data_loop.py",
    "test_metrics": "accelerate/test_utils/scripts/external_deps/test_metrics.py",
    "test_checkpointing": "accelerate/test_utils/scripts/external_deps/test_checkpointing.py",
    "test_performance": "accelerate/test_utils/scripts/external_deps/test_performance.py",
}
OFFLINE = {"test_checkpointing", "test_performance"}


def script_path(name: str) -> str:
    spec = importlib.util.find_spec("accelerate")
    assert spec is not None and spec.origin is not None
    return os.path.join(os.path.dirname(os.path.dirname(spec.origin)), SCRIPTS[name])


class _SwapAccelerator(ast.NodeTransformer):
    """``from accelerate[.accelerator] import Accelerator, X`` → ``from trainer_core import Accelerator``
    plus ``from accelerate[...] import X``."""

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST | list[ast.stmt]:
        if node.module not in ("accelerate", "accelerate.accelerator"):
            return node
        ours = [alias for alias in node.names if alias.name == "Accelerator"]
        if not ours:
            return node
        rest = [alias for alias in node.names if alias.name != "Accelerator"]
        swapped: list[ast.stmt] = [ast.ImportFrom(module="trainer_core", names=ours, level=0)]
        if rest:
            swapped.append(ast.ImportFrom(module=node.module, names=rest, level=0))
        return swapped


class _Offline(ast.NodeTransformer):
    """``from datasets import load_dataset`` and ``import evaluate`` → their ``accelerate_offline`` stand-ins."""

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST | list[ast.stmt]:
        if node.module != "datasets" or not any(alias.name == "load_dataset" for alias in node.names):
            return node
        rest = [alias for alias in node.names if alias.name != "load_dataset"]
        offline: list[ast.stmt] = [
            ast.ImportFrom(module="accelerate_offline", names=[ast.alias("load_dataset")], level=0)
        ]
        return offline + ([ast.ImportFrom(module="datasets", names=rest, level=0)] if rest else [])

    def visit_Import(self, node: ast.Import) -> ast.AST:
        names = [ast.alias("accelerate_offline", "evaluate") if a.name == "evaluate" else a for a in node.names]
        return ast.Import(names=names)


class _RecordTests(ast.NodeTransformer):
    """In ``main``: ``test_x(...)`` → ``try: test_x(...); __record(...) except: __record(...)``."""

    def __init__(self, tests: set[str]) -> None:
        self.tests = tests
        self.in_main = False

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        if node.name != "main":
            return node
        self.in_main = True
        self.generic_visit(node)
        self.in_main = False
        return node

    def visit_Expr(self, node: ast.Expr) -> ast.AST:
        call = node.value
        if not (self.in_main and isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
            return node
        if call.func.id not in self.tests:
            return node
        label = ast.unparse(call)
        record = ast.parse(
            f"try:\n    __begin()\n    pass\n    __record({label!r}, None)\nexcept BaseException as __error:\n"
            f"    __record({label!r}, __error)"
        ).body[0]
        assert isinstance(record, ast.Try)
        record.body[1] = node
        return ast.copy_location(record, node)


def transformed(name: str, library: str) -> ast.Module:
    path = script_path(name)
    with open(path) as file:
        tree = ast.parse(file.read(), path)
    tests = {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name != "main" and not node.name.startswith("_")
    }
    if library == "trainer_core":
        tree = _SwapAccelerator().visit(tree)
    if name in OFFLINE:
        tree = _Offline().visit(tree)
    tree = _RecordTests(tests).visit(tree)
    return ast.fix_missing_locations(tree)


class _Uses:
    """Whether trainer_core's objects were used since ``begin``: each attribute read of one is noted."""

    def __init__(self) -> None:
        self.used = False

    def begin(self) -> None:
        self.used = False

    def watch(self, cls: type) -> None:
        original = cls.__getattribute__
        uses = self

        def __getattribute__(obj, name):
            uses.used = True
            return original(obj, name)

        cls.__getattribute__ = __getattribute__  # type: ignore[method-assign]


def _watch_trainer_core(uses: _Uses) -> None:
    from trainer_core import Accelerator
    from trainer_core.data import PreparedDataLoader
    from trainer_core.optim import PreparedOptimizer, PreparedScheduler
    from trainer_core.state import DistributedState

    for cls in (Accelerator, DistributedState, PreparedDataLoader, PreparedOptimizer, PreparedScheduler):
        uses.watch(cls)


def harness_arguments(given: list[str]) -> tuple[str, str, str, list[str]]:
    """``SCRIPT OUT [--library LIBRARY] [-- SCRIPT ARGS...]`` → (script, out, library, script args).

    Examples:
        >>> harness_arguments(["test_sync", "out", "--library", "accelerate", "--", "--epochs", "2"])
        ('test_sync', 'out', 'accelerate', ['--epochs', '2'])
        >>> harness_arguments(["test_sync", "out"])
        ('test_sync', 'out', 'trainer_core', [])
    """
    cut = given.index("--") if "--" in given else len(given)
    harness_args, script_args = given[:cut], given[cut + 1 :]
    library = harness_args[3] if len(harness_args) > 3 and harness_args[2] == "--library" else "trainer_core"
    return harness_args[0], harness_args[1], library, script_args


def main() -> None:
    name, out, library, script_args = harness_arguments(sys.argv[1:])
    rank = int(os.environ.get("RANK", "0"))
    results = open(f"{out}.rank{rank}", "a")  # noqa: SIM115 (open while the script runs, closed at exit)

    uses = _Uses()
    if library == "trainer_core":
        _watch_trainer_core(uses)

    def record(call: str, error: BaseException | None) -> None:
        entry = {"call": call, "passed": error is None, "ours": uses.used}
        if error is not None:
            entry["error"] = f"{type(error).__name__}: {error}"[:500]
            entry["where"] = "".join(traceback.format_tb(error.__traceback__)[-2:])[-800:]
        results.write(json.dumps(entry) + "\n")
        results.flush()

    path = script_path(name)
    namespace = {"__name__": "__main__", "__file__": path, "__record": record, "__begin": uses.begin}
    sys.path.insert(0, os.path.dirname(path))
    sys.argv = [path, *script_args]
    exec(compile(transformed(name, library), path, "exec"), namespace)
    results.write(json.dumps({"ended": name}) + "\n")  # main returned: every test call it makes was made
    results.flush()


if __name__ == "__main__":
    main()
