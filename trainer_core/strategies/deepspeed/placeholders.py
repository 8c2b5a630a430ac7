"""``DummyOptim`` and ``DummyScheduler``: stand-ins for the optimizer and schedule a DeepSpeed config names.

When the DeepSpeed config has an ``"optimizer"`` (or ``"scheduler"``) section, DeepSpeed builds it,
yet a training loop written for Accelerate still wants an object to ``prepare`` and call. As in
Accelerate, the code passes ``DummyOptim(model.parameters(), lr=...)`` (and ``DummyScheduler``) to
``prepare``; their values fill the config's ``"auto"`` entries (``placeholder_values``) and
``prepare`` hands back the optimizer and schedule DeepSpeed built. Accelerate's own ``DummyOptim``
and ``DummyScheduler`` are accepted too.

Examples:
    >>> import torch
    >>> optimizer = DummyOptim(torch.nn.Linear(2, 2).parameters(), lr=0.01, weight_decay=0.1)
    >>> scheduler = DummyScheduler(optimizer, total_num_steps=100, warmup_num_steps=10)
    >>> is_placeholder_optimizer(optimizer), is_placeholder_scheduler(scheduler)
    (True, True)
    >>> values = placeholder_values(optimizer, scheduler, num_processes=2, split_batches=False)
    >>> values["optimizer.params.lr"], values["scheduler.params.total_num_steps"]
    (0.01, 50)
"""

from __future__ import annotations

import math
from typing import Any

__all__ = [
    "DummyOptim",
    "DummyScheduler",
    "is_placeholder_optimizer",
    "is_placeholder_scheduler",
    "check_placeholders",
    "placeholder_values",
]


class DummyOptim:
    """The optimizer the DeepSpeed config names: the parameters it updates, and the values that
    fill the config's ``"auto"`` learning rate and weight decay.

    Examples:
        >>> import torch
        >>> DummyOptim(torch.nn.Linear(2, 2).parameters()).lr
        0.001
    """

    def __init__(self, params: Any, lr: float = 0.001, weight_decay: float = 0, **kwargs: Any) -> None:
        self.params = params
        self.lr = lr
        self.weight_decay = weight_decay
        self.kwargs = kwargs


class DummyScheduler:
    """The schedule the DeepSpeed config names (its ``"auto"`` steps filled from here), or, with
    ``lr_scheduler_callable``, one that callable builds from DeepSpeed's optimizer.

    Examples:
        >>> import torch
        >>> optimizer = DummyOptim(torch.nn.Linear(2, 2).parameters())
        >>> DummyScheduler(optimizer, warmup_num_steps=5).warmup_num_steps
        5
    """

    def __init__(
        self,
        optimizer: Any,
        total_num_steps: int | None = None,
        warmup_num_steps: int = 0,
        lr_scheduler_callable: Any = None,
        **kwargs: Any,
    ) -> None:
        self.optimizer = optimizer
        self.total_num_steps = total_num_steps
        self.warmup_num_steps = warmup_num_steps
        self.lr_scheduler_callable = lr_scheduler_callable
        self.kwargs = kwargs


def _named(obj: Any, name: str, fields: tuple[str, ...]) -> bool:
    """Ours, or Accelerate's class of that name (recognised without importing accelerate)."""
    cls = type(obj)
    return (
        cls.__name__ == name
        and cls.__module__.split(".")[0] in ("trainer_core", "accelerate")
        and all(hasattr(obj, field) for field in fields)
    )


def is_placeholder_optimizer(obj: Any) -> bool:
    """Whether ``obj`` is a ``DummyOptim`` (trainer_core's or Accelerate's)."""
    return _named(obj, "DummyOptim", ("params", "lr", "weight_decay"))


def is_placeholder_scheduler(obj: Any) -> bool:
    """Whether ``obj`` is a ``DummyScheduler`` (trainer_core's or Accelerate's)."""
    return _named(obj, "DummyScheduler", ("optimizer", "total_num_steps", "warmup_num_steps"))


def check_placeholders(config: dict, optimizer: Any, scheduler: Any) -> None:
    """Refuse what DeepSpeed could not honour, as Accelerate does: an optimizer (schedule) both in the
    config and in the code, a placeholder with nothing in the config to stand for.

    Examples:
        >>> check_placeholders({"zero_optimization": {}}, DummyOptim([]), None)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: DummyOptim stands for the optimizer the DeepSpeed config names, and this config has no ...
    """
    if optimizer is not None:
        if "optimizer" in config and not is_placeholder_optimizer(optimizer):
            raise ValueError(
                'the DeepSpeed config names an optimizer ("optimizer" section) and prepare() was given one too:'
                " remove one, or pass DummyOptim(model.parameters(), lr=...) to stand for the config's"
            )
        if "optimizer" not in config and is_placeholder_optimizer(optimizer):
            raise ValueError(
                'DummyOptim stands for the optimizer the DeepSpeed config names, and this config has no "optimizer"'
                " section: add one, or pass a torch optimizer"
            )
    if scheduler is not None:
        if "scheduler" in config and not is_placeholder_scheduler(scheduler):
            raise ValueError(
                'the DeepSpeed config names a schedule ("scheduler" section) and prepare() was given one too:'
                " remove one, or pass DummyScheduler(optimizer, ...) to stand for the config's"
            )
        placeholder = is_placeholder_scheduler(scheduler)
        if placeholder and "scheduler" not in config and scheduler.lr_scheduler_callable is None:
            raise ValueError(
                'DummyScheduler stands for the schedule the DeepSpeed config names, and this config has no "scheduler"'
                " section: add one, or give DummyScheduler(..., lr_scheduler_callable=) a function that builds it"
            )
        if placeholder and optimizer is not None and not is_placeholder_optimizer(optimizer):
            raise ValueError("DummyScheduler goes with DummyOptim: with a torch optimizer, pass a torch scheduler")


def placeholder_values(optimizer: Any, scheduler: Any, num_processes: int, split_batches: bool) -> dict[str, Any]:
    """The config values (dotted keys) the placeholders fill where the config says ``"auto"``:
    learning rate and weight decay from ``DummyOptim``; warm-up from 0 to the optimizer's learning
    rate over ``warmup_num_steps`` (at least 1, as DeepSpeed requires) and ``total_num_steps`` per
    process (divided by the ranks unless batches are split), as Accelerate fills them."""
    values: dict[str, Any] = {}
    if is_placeholder_optimizer(optimizer):
        values.update({"optimizer.params.lr": optimizer.lr, "optimizer.params.weight_decay": optimizer.weight_decay})
    if is_placeholder_scheduler(scheduler) and scheduler.lr_scheduler_callable is None:
        inner = scheduler.optimizer
        defaults = getattr(inner, "defaults", None)
        peak = defaults["lr"] if defaults is not None else getattr(inner, "lr", None)
        values.update(
            {
                "scheduler.params.warmup_min_lr": 0,
                "scheduler.params.warmup_max_lr": peak,
                "scheduler.params.warmup_num_steps": max(1, scheduler.warmup_num_steps),
            }
        )
        if scheduler.total_num_steps is not None:
            total = scheduler.total_num_steps
            values["scheduler.params.total_num_steps"] = total if split_batches else math.ceil(total / num_processes)
    return values
