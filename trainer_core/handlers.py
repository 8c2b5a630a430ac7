"""Accelerate-style kwargs handlers: options for the objects the Accelerator makes.

Matched by class name, so Accelerate's own ``DistributedDataParallelKwargs``, ``GradScalerKwargs``
and ``InitProcessGroupKwargs`` work as they are (their ``to_kwargs()`` gives the values set):
DDP options for prepared models, GradScaler options for fp16, and the process group's timeout
when the Accelerator is the one that creates it.
"""

from __future__ import annotations

__all__ = ["handler_kwargs"]


def handler_kwargs(handlers):
    """(DDP options, GradScaler options, process-group timeout) from the handlers.

    Examples:
        >>> class DistributedDataParallelKwargs:
        ...     def to_kwargs(self): return {"find_unused_parameters": True}
        >>> handler_kwargs([DistributedDataParallelKwargs()])
        ({'find_unused_parameters': True}, {}, None)
    """
    ddp: dict = {}
    scaler: dict = {}
    timeout = None
    for handler in handlers or []:
        name = type(handler).__name__
        values = handler.to_kwargs() if hasattr(handler, "to_kwargs") else dict(vars(handler))
        if name == "DistributedDataParallelKwargs":
            ddp.update(values)
        elif name == "GradScalerKwargs":
            scaler.update(values)
        elif name == "InitProcessGroupKwargs":
            timeout = values.get("timeout", timeout)
        else:
            raise ValueError(
                f"kwargs handler {name} is not supported: use DistributedDataParallelKwargs, GradScalerKwargs"
                " or InitProcessGroupKwargs"
            )
    return ddp, scaler, timeout
