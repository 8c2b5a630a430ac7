"""The kernel's process-wide settings that a forked rank inherits, carried to a spawned one.

A forked rank is a copy of the kernel: ``torch.manual_seed(0)`` in a cell, deterministic
algorithms, ``cudnn.benchmark``, Python's and NumPy's random state all hold in it. A spawned rank
(and one forked from the start server) is a fresh interpreter; without this it would draw other
random numbers than the same launch under fork. The snapshot is taken in the kernel when a launch
is prepared and restored in the rank before the user's function is loaded. Only modules the kernel
has already imported are read (importing torch to read its defaults would cost seconds), and CUDA's
generators only when the kernel has initialized CUDA itself.

Examples:
    >>> import random
    >>> random.seed(3); snapshot = GlobalState.capture(); first = random.random()
    >>> snapshot.restore(); random.random() == first
    True
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

__all__ = ["GlobalState"]


@dataclass(frozen=True)
class GlobalState:
    python_random: Any = None
    numpy_random: Any = None
    torch: dict[str, Any] | None = None  # plain values only: a spawned rank unpickles it before torch

    @classmethod
    def capture(cls) -> GlobalState:
        """The settings of this process that a fork would carry."""
        import random

        numpy = sys.modules.get("numpy")
        return cls(
            python_random=random.getstate(),
            numpy_random=numpy.random.get_state() if numpy is not None else None,
            torch=_torch_state(sys.modules.get("torch")),
        )

    @classmethod
    def lost_in_a_fork(cls) -> GlobalState:
        """What a fork does not carry: Python reseeds ``random`` in every forked child (NumPy's and
        torch's states are copied with the process, and restoring torch's costs a rank 4 ms).

        Examples:
            >>> GlobalState.lost_in_a_fork().torch is None
            True
        """
        import random

        return cls(python_random=random.getstate())

    def restore(self) -> None:
        """Make this process's settings the captured ones."""
        import random

        if self.python_random is not None:
            random.setstate(self.python_random)
        if self.numpy_random is not None:
            import numpy

            numpy.random.set_state(self.numpy_random)
        if self.torch is not None:
            _restore_torch(self.torch)


def _torch_state(torch: Any) -> dict[str, Any] | None:
    if torch is None or not hasattr(torch, "get_rng_state"):
        return None
    state = {
        "seed": torch.initial_seed(),
        "rng": bytes(torch.get_rng_state().numpy().tobytes()),
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "deterministic_warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "cudnn_deterministic": torch.backends.cudnn.deterministic,
        "cuda_rng": None,
    }
    if torch.cuda.is_initialized():  # reading CUDA's generators must not be what initializes CUDA
        state["cuda_rng"] = [bytes(s.numpy().tobytes()) for s in torch.cuda.get_rng_state_all()]
    return state


def _restore_torch(state: dict[str, Any]) -> None:
    import torch

    torch.manual_seed(state["seed"])  # CUDA's generators get the kernel's seed when CUDA starts, as after a fork
    torch.set_rng_state(torch.frombuffer(bytearray(state["rng"]), dtype=torch.uint8))
    deterministic = (state["deterministic"], state["deterministic_warn_only"])
    if deterministic != (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    ):
        # only when it differs: setting it imports torch._inductor, about a second a rank
        torch.use_deterministic_algorithms(deterministic[0], warn_only=deterministic[1])
    torch.backends.cudnn.benchmark = state["cudnn_benchmark"]
    torch.backends.cudnn.deterministic = state["cudnn_deterministic"]
    cuda_rng = state["cuda_rng"]
    if cuda_rng is not None and torch.cuda.is_available() and len(cuda_rng) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all([torch.frombuffer(bytearray(s), dtype=torch.uint8) for s in cuda_rng])
