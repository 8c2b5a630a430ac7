"""Sharing the set-up with Hugging Face Accelerate, for code that mixes the two.

Code written for Accelerate often reaches for Accelerate's own singletons next to the Accelerator
(``AcceleratorState()``, ``PartialState()``, ``GradientState()``, ``accelerate.utils.gather``).
Those raise unless an Accelerate ``Accelerator`` has initialized them. When such code swaps in
``trainer_core.Accelerator``, the Accelerator initializes them too — with the same device, process
group and mixed precision — so the rest of the code keeps working. Only when the process has
imported accelerate already: trainer_core never imports it for its own use.

Examples:
    >>> share_state_with_accelerate("no", cpu=True)   # nothing to do unless accelerate is imported
"""

from __future__ import annotations

import sys
import warnings

__all__ = ["share_state_with_accelerate"]


def share_state_with_accelerate(mixed_precision: str, cpu: bool) -> None:
    """Initialize Accelerate's ``AcceleratorState`` like this Accelerator, if accelerate is imported."""
    if "accelerate" not in sys.modules:
        return
    try:
        from accelerate.state import AcceleratorState
        from accelerate.utils import TorchDynamoPlugin

        # as Accelerate's own Accelerator builds it (an Accelerator made later shares it)
        AcceleratorState(
            mixed_precision=mixed_precision, cpu=cpu, dynamo_plugin=TorchDynamoPlugin(), _from_accelerator=True
        )
    except Exception as err:  # an Accelerate this code cannot drive: trainer_core works without it
        warnings.warn(
            f"trainer_core could not initialize Hugging Face Accelerate's state ({type(err).__name__}: {err});"
            " accelerate's own helpers may refuse to run",
            stacklevel=3,
        )
