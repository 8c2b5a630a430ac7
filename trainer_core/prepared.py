"""What an Accelerator has prepared, in preparation order: one owner, handed to checkpointing.

Models moved to some devices (XLA) get new parameter objects; ``moved`` maps the old ones to the
new ones so optimizers built before the move are pointed at the parameters the device holds.

Examples:
    >>> import torch
    >>> prepared = PreparedObjects()
    >>> prepared.models.append(torch.nn.Linear(2, 2))
    >>> len(prepared.models), prepared.optimizers
    (1, [])
"""

from __future__ import annotations

from typing import Any

__all__ = ["PreparedObjects"]


class PreparedObjects:
    def __init__(self) -> None:
        self.models: list[Any] = []
        self.optimizers: list[Any] = []
        self.schedulers: list[Any] = []
        self.dataloaders: list[Any] = []
        self.custom: list[Any] = []  # objects registered for checkpointing (``state_dict``/``load_state_dict``)
        self.moved: dict[int, tuple[Any, Any]] = {}  # id(parameter before prepare) -> (it, its replacement)

    def note_moved(self, before: dict, after: dict) -> None:
        """Record parameters replaced by a move (``named_parameters`` before and after) and repoint optimizers."""
        for name, parameter in after.items():
            if parameter is not before[name]:
                self.moved[id(before[name])] = (before[name], parameter)
        for optimizer in self.optimizers:
            optimizer.rebind(self.moved)

    def clear(self) -> None:
        """Forget everything (``Accelerator.free_memory``)."""
        self.__init__()  # type: ignore[misc]
