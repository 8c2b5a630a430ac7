"""Inside a rank, libraries that would start training processes of their own say so and stop.

A rank is already one of the launch's processes, with the launch's ``torch.distributed``
environment. Lightning's ``strategy="ddp_notebook"`` (and ``"ddp_spawn"``) forks or spawns
``devices`` processes from it, which meet at the launch's own address and port and end in a bare
gloo "Connection reset by peer". So the launcher those strategies use (``_MultiProcessingLauncher``
of Lightning's Trainer and Fabric, under either package name) raises, when it would start them, an
error that says what works: ``strategy="ddp"`` with ``devices`` the launch's number of processes
(Lightning then finds the ranks the launch started, as under torchrun), or the Trainer in the
kernel itself, without a launch.

Example (what the rank bootstrap arranges)::

    refuse_nested_launchers()
    trainer = L.Trainer(strategy="ddp_notebook", devices=2)
    trainer.fit(model)        # RuntimeError: ... use Trainer(strategy="ddp", devices=2) ...
"""

from __future__ import annotations

import os
from typing import Any

from ..import_hooks import after_import

__all__ = ["refuse_nested_launchers", "nested_launch_message"]

_LIGHTNING_LAUNCHERS = (
    "lightning.pytorch.strategies.launchers.multiprocessing",
    "lightning.fabric.strategies.launchers.multiprocessing",
    "pytorch_lightning.strategies.launchers.multiprocessing",
    "lightning_fabric.strategies.launchers.multiprocessing",
)
_STRATEGIES = {"fork": "ddp_notebook", "spawn": "ddp_spawn", "forkserver": "ddp_spawn"}


def refuse_nested_launchers() -> None:
    """Make Lightning's multiprocessing launcher refuse to start processes in this rank, whenever
    the rank imports it (the kernel may have imported it before a fork, too)."""
    for name in _LIGHTNING_LAUNCHERS:
        after_import(name, _refuse_lightning)


def nested_launch_message(start_method: str, ranks_here: str | None) -> str:
    """What the refusal says, for Lightning's ``start_method`` and the launch's ranks on this machine.

    Examples:
        >>> print(nested_launch_message("fork", "2"))  # doctest: +ELLIPSIS
        Lightning's strategy="ddp_notebook" starts processes of its own, and this is already one of ...
    """
    devices = ranks_here or "N"
    strategy = _STRATEGIES.get(start_method, "ddp_spawn")
    return (
        f'Lightning\'s strategy="{strategy}" starts processes of its own, and this is already one of the'
        f" launch's {devices} ranks on this machine (they would meet at the launch's address and fail with a bare gloo"
        f' "connection reset"). Use Trainer(strategy="ddp", devices={devices}): the launch\'s ranks are'
        f" the processes, as under torchrun. Or call the Trainer in the kernel without a launch,"
        f' with strategy="{strategy}" there.'
    )


def _refuse_lightning(module: Any) -> None:
    launcher = getattr(module, "_MultiProcessingLauncher", None)
    if launcher is None or getattr(launcher.launch, "_refused_in_rank", False):
        return

    def launch(self: Any, function: Any, *args: Any, **kwargs: Any) -> Any:
        method = getattr(self, "_start_method", "spawn")
        ranks_here = os.environ.get("LOCAL_WORLD_SIZE") or os.environ.get("WORLD_SIZE")
        raise RuntimeError(nested_launch_message(method, ranks_here))

    launch._refused_in_rank = True  # type: ignore[attr-defined]
    launcher.launch = launch
