"""Build models without memory: parameters (and, on request, buffers) on the meta device.

``nn.Module.__init__`` code makes each parameter on the CPU with ``torch.empty`` (pages never
touched, so they cost nothing) and registers it; inside ``init_on_device`` the registration moves
it to the device at once, so a model of any size is built in milliseconds and holds no memory.
Initialisers that run after registration (``reset_parameters``) see meta tensors and do nothing.
With ``include_buffers=True`` every tensor is made on the device by torch's own device context,
which also builds single layers too large to allocate even untouched.

Examples:
    >>> import torch
    >>> with init_empty_weights():
    ...     model = torch.nn.Sequential(torch.nn.Linear(10_000, 10_000), torch.nn.BatchNorm1d(10_000))
    >>> model[0].weight.device, model[1].running_mean.device
    (device(type='meta'), device(type='cpu'))
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

__all__ = ["init_empty_weights", "init_on_device"]


@contextlib.contextmanager
def init_empty_weights(include_buffers: bool = False) -> Iterator[None]:
    """Modules created inside get their parameters (and buffers with ``include_buffers``) on the
    meta device: shapes and dtypes only, no memory. Load weights later with
    ``load_checkpoint_and_dispatch`` (or ``module.to_empty(device=...)`` and your own init).

    Examples:
        >>> with init_empty_weights():
        ...     layer = torch.nn.Linear(4, 2)
        >>> layer.weight.is_meta
        True
    """
    with init_on_device(torch.device("meta"), include_buffers=include_buffers):
        yield


@contextlib.contextmanager
def init_on_device(device: torch.device | str, include_buffers: bool = False) -> Iterator[None]:
    """Modules created inside get their parameters (and buffers with ``include_buffers``) on ``device``.

    Examples:
        >>> with init_on_device("cpu"):
        ...     layer = torch.nn.Linear(4, 2)
        >>> layer.weight.device
        device(type='cpu')
    """
    device = torch.device(device)
    if include_buffers:  # every tensor a factory function makes: torch's own device context
        with torch.device(device):
            yield
        return
    original = torch.nn.Module.register_parameter

    def register_parameter(module: torch.nn.Module, name: str, param: torch.nn.Parameter | None) -> None:
        original(module, name, param)
        if param is not None and param.device != device:
            kept = dict(param.__dict__)  # attributes some Parameter subclasses carry
            moved = type(param)(param.to(device), requires_grad=param.requires_grad)
            moved.__dict__.update(kept)
            module._parameters[name] = moved

    torch.nn.Module.register_parameter = register_parameter  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = original  # type: ignore[method-assign]
