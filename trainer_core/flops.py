"""Model FLOPs utilisation (MFU): the share of its device's dense peak that a rank's training uses.

The model's FLOPs per optimizer step are counted once, over the forward passes of the first step
(``torch.utils.flop_counter``, entered and left inside each forward, so nothing of it outlives a
forward that raises), and taken three times: a backward pass costs about twice its forward, the
rule behind the 6·N FLOPs per token of transformer language models. Then each pace report gives
``MFU %`` = FLOPs per step × steps per second / the peak.

The peak comes from ``DENSE_TFLOPS`` (the GPU's name and the training precision), or from
``NOTEBOOK_LAUNCHER_PEAK_TFLOPS`` for a device not in the table; a CPU has none, so no MFU is shown
there unless that variable is set.

Examples:
    >>> peak_tflops("NVIDIA H100 80GB HBM3", "bf16", {}), peak_tflops("Tesla T4", "fp16", {})
    (989.0, 65.0)
    >>> peak_tflops(None, "no", {}), peak_tflops(None, "no", {PEAK_ENV: "0.5"})
    (None, 0.5)
    >>> import torch
    >>> counter = ForwardFlops()
    >>> model = torch.nn.Linear(8, 4, bias=False)
    >>> counter.attach(model)
    >>> _ = model(torch.zeros(2, 8))
    >>> counter.stop()  # 3 x the forward's 2*2*8*4
    384
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["ForwardFlops", "peak_tflops", "DENSE_TFLOPS", "PEAK_ENV", "TRAINING_FACTOR"]

PEAK_ENV = "NOTEBOOK_LAUNCHER_PEAK_TFLOPS"
TRAINING_FACTOR = 3  # forward + backward ≈ three forwards

# Dense (no sparsity) peaks in TFLOPS from the vendors' data sheets, by a fragment of the name torch
# gives the GPU (the first that matches: A100 before A10) and the precision of the matmuls.
DENSE_TFLOPS: tuple[tuple[str, Mapping[str, float]], ...] = (
    ("H200", {"fp8": 1979.0, "bf16": 989.0, "fp16": 989.0, "tf32": 494.5, "fp32": 66.9}),
    ("H100", {"fp8": 1979.0, "bf16": 989.0, "fp16": 989.0, "tf32": 494.5, "fp32": 66.9}),
    ("A100", {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}),
    ("L4", {"fp8": 242.0, "bf16": 121.0, "fp16": 121.0, "tf32": 60.0, "fp32": 30.3}),
    ("A10", {"bf16": 125.0, "fp16": 125.0, "tf32": 62.5, "fp32": 31.2}),
    ("T4", {"fp16": 65.0, "fp32": 8.1}),
    ("V100", {"fp16": 125.0, "fp32": 15.7}),
)


def peak_tflops(device_name: str | None, precision: str, environ: Mapping[str, str] = os.environ) -> float | None:
    """The dense peak (TFLOPS) for training at ``precision`` ("no", "fp16", "bf16", "fp8") on the
    GPU named ``device_name`` (None: not a GPU); ``NOTEBOOK_LAUNCHER_PEAK_TFLOPS`` wins where set.
    Full precision counts as TF32 where torch lets matmuls use it. None where unknown."""
    if environ.get(PEAK_ENV):
        return float(environ[PEAK_ENV])
    if device_name is None:
        return None
    if precision == "no":
        precision = "tf32" if torch.backends.cuda.matmul.allow_tf32 else "fp32"
    for fragment, peaks in DENSE_TFLOPS:
        if fragment in device_name:
            return peaks.get(precision)
    return None


class ForwardFlops:
    """Counts the FLOPs of the forward passes of the modules it is attached to, until ``stop()``,
    which returns them times ``TRAINING_FACTOR`` (the step's FLOPs) and detaches."""

    def __init__(self) -> None:
        self.forward_flops = 0
        self._handles: list[Any] = []
        self._open: list[Any] = []  # the counters of forwards under way (a model may call another)
        self.failed = False

    def attach(self, module: torch.nn.Module) -> None:
        self._handles.append(module.register_forward_pre_hook(self._enter))
        self._handles.append(module.register_forward_hook(self._leave, always_call=True))

    def _enter(self, _module: Any, _args: Any) -> None:
        if self._open or self.failed:  # a module inside a counted one: its FLOPs are counted already
            self._open.append(None)
            return
        from torch.utils.flop_counter import FlopCounterMode

        counter: Any = FlopCounterMode(display=False)
        try:
            counter.__enter__()
        except Exception:  # a mode that cannot be entered here (a tracer, a compile): no MFU rather than a failure
            self.failed = True
            counter = None
        self._open.append(counter)

    def _leave(self, _module: Any, _args: Any, _output: Any) -> None:
        counter = self._open.pop() if self._open else None
        if counter is None:
            return
        try:
            counter.__exit__(None, None, None)
            self.forward_flops += counter.get_total_flops()
        except Exception:
            self.failed = True

    def stop(self) -> int | None:
        """The FLOPs of the step (None if counting failed, or nothing ran forward); detaches."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        if self.failed or not self.forward_flops:
            return None
        return TRAINING_FACTOR * self.forward_flops

    @property
    def attached(self) -> bool:
        return bool(self._handles)
