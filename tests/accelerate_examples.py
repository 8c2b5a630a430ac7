"""Hugging Face Accelerate's example scripts on trainer_core: run one, keep its final weights.

Run by torchrun on every rank: ``torchrun --nproc_per_node 2 tests/accelerate_examples.py EXAMPLE
WEIGHTS [--library trainer_core|accelerate] [-- SCRIPT ARGS...]``, where EXAMPLE is a script from a
checkout of Accelerate's ``examples/`` folder (they ship in neither its wheel nor its sdist). The
script runs as a user would run it, changed only on its syntax tree:

1. with ``--library trainer_core``, ``Accelerator`` is imported from ``trainer_core`` (every other
   name still comes from accelerate, as ``accelerate_compat.py`` does for the test scripts);
2. ``datasets.load_dataset`` and ``evaluate`` come from ``accelerate_offline`` (MRPC-shaped data and
   its metric, WikiText-shaped lines) and the Hub names of the examples' models become tiny local
   ones: ``"bert-base-cased"`` the BERT named by ``NL_TINY_BERT``, SmolLM the causal LM named by
   ``NL_TINY_CAUSAL_LM`` (only package registries are reachable here).

The model the script prepared last is the one it trained: its full state dict
(``accelerator.get_state_dict``, a collective for sharded models) is taken on every rank when the
script calls ``end_training`` (Accelerate's destroys the process group) or, if it never does, when
its ``main`` returns, and rank 0 writes it to WEIGHTS with ``torch.save``, as ``{"final": ...,
"initial": ...}``: the initial weights are the model's as it was handed to ``prepare`` (so a reader
can tell how far training moved them).
"""

from __future__ import annotations

import ast
import os
import sys
from typing import Any

from accelerate_compat import _Offline, _SwapAccelerator, harness_arguments

HUB_MODELS = {"bert-base-cased": "NL_TINY_BERT", "HuggingFaceTB/SmolLM-360M": "NL_TINY_CAUSAL_LM"}


class _TinyModel(ast.NodeTransformer):
    """A Hub model's name → ``os.environ[<its stand-in's variable>]`` (read when the script runs)."""

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if node.value not in HUB_MODELS:
            return node
        swapped = ast.parse(f'__import__("os").environ["{HUB_MODELS[node.value]}"]', mode="eval").body
        return ast.copy_location(swapped, node)


def transformed(path: str, library: str) -> ast.Module:
    with open(path) as file:
        tree = ast.parse(file.read(), path)
    if library == "trainer_core":
        tree = _SwapAccelerator().visit(tree)
    tree = _TinyModel().visit(_Offline().visit(tree))
    return ast.fix_missing_locations(tree)


class _Weights:
    """Notes the model each ``prepare`` hands back; writes the last one's weights once."""

    def __init__(self, out: str) -> None:
        self.out = out
        self.prepared: tuple[Any, Any] | None = None
        self.initial: dict[str, Any] = {}
        self.written = False

    def watch(self, cls: type) -> None:
        import torch

        weights = self
        prepare, end_training = cls.prepare, cls.end_training

        def noting_prepare(accelerator, *args, **kwargs):
            handed = [arg for arg in args if isinstance(arg, torch.nn.Module)]
            initial = _cpu_copy(handed[-1].state_dict()) if handed else None
            result = prepare(accelerator, *args, **kwargs)
            if initial is not None:
                weights.initial = initial
            for item in result if isinstance(result, tuple) else (result,):
                if isinstance(item, torch.nn.Module):
                    weights.prepared = (accelerator, item)
            return result

        def writing_end_training(accelerator):
            weights.write()
            return end_training(accelerator)

        cls.prepare = noting_prepare  # type: ignore[method-assign]
        cls.end_training = writing_end_training  # type: ignore[method-assign]

    def write(self) -> None:
        import torch

        if self.written or self.prepared is None:
            return
        self.written = True
        accelerator, model = self.prepared
        state = accelerator.get_state_dict(model)
        if int(os.environ.get("RANK", "0")) == 0:
            torch.save({"final": _cpu_copy(state), "initial": self.initial}, self.out)


def _cpu_copy(state: dict[str, Any]) -> dict[str, Any]:
    return {name: tensor.detach().float().cpu().clone() for name, tensor in state.items()}


def main() -> None:
    script, out, library, script_args = harness_arguments(sys.argv[1:])
    path = os.path.abspath(script)

    weights = _Weights(out)
    if library == "trainer_core":
        from trainer_core import Accelerator
    else:
        from accelerate import Accelerator
    weights.watch(Accelerator)

    namespace = {"__name__": "__example__", "__file__": path}
    sys.path.insert(0, os.path.dirname(path))
    sys.argv = [path, *script_args]
    exec(compile(transformed(path, library), path, "exec"), namespace)
    namespace["main"]()
    weights.write()


if __name__ == "__main__":
    main()
