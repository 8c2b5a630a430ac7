"""What the Accelerator offers for running code on some processes only, in order, or on a share.

``Accelerator`` inherits these methods; they read only its ``state`` (``DistributedState``), so
they are the same under every strategy.

Examples:
    >>> from trainer_core import Accelerator
    >>> accelerator = Accelerator(cpu=True)
    >>> with accelerator.split_between_processes(["a", "b", "c"]) as mine:
    ...     mine
    ['a', 'b', 'c']
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import torch

from .. import ops
from ..state import DistributedState

__all__ = ["ProcessHelpers"]

_T = TypeVar("_T")


class ProcessHelpers:
    """Who and where this process is; barriers, main-process-first blocks, per-process decorators,
    shares and a trigger any rank can raise."""

    state: DistributedState
    _trigger: bool

    # -- who and where ----------------------------------------------------------------------------

    @property
    def process_index(self) -> int:
        """This process's rank among all (0 to ``num_processes - 1``)."""
        return self.state.process_index

    @property
    def local_process_index(self) -> int:
        """This process's rank on its node."""
        return self.state.local_process_index

    @property
    def num_processes(self) -> int:
        """How many processes train together."""
        return self.state.num_processes

    @property
    def distributed_type(self) -> str:
        """Accelerate's name for the set-up ("NO", "MULTI_CPU", "MULTI_GPU", "XLA")."""
        return self.state.distributed_type

    @property
    def is_last_process(self) -> bool:
        return self.state.is_last_process

    @property
    def is_main_process(self) -> bool:
        return self.state.is_main_process

    @property
    def is_local_main_process(self) -> bool:
        return self.state.is_local_main_process

    @property
    def device(self) -> torch.device:
        return self.state.device

    @property
    def use_distributed(self) -> bool:
        return self.state.distributed

    def wait_for_everyone(self) -> None:
        """A barrier: every process waits here until all have come."""
        self.state.barrier()

    @contextlib.contextmanager
    def main_process_first(self) -> Iterator[None]:
        """The main process runs the block first (e.g. to download or cache), then the others."""
        if not self.is_main_process:
            self.wait_for_everyone()
        yield
        if self.is_main_process:
            self.wait_for_everyone()

    @contextlib.contextmanager
    def local_main_process_first(self) -> Iterator[None]:
        """Each node's local main process runs the block first, then the node's others."""
        if not self.is_local_main_process:
            self.wait_for_everyone()
        yield
        if self.is_local_main_process:
            self.wait_for_everyone()

    @contextlib.contextmanager
    def split_between_processes(self, inputs: Any, apply_padding: bool = False) -> Iterator[Any]:
        """This rank's contiguous share of a list, tuple, tensor, ``datasets.Dataset`` (its rows) or
        dict of them.

        Example (assuming 2 processes): ``["a", "b", "c"]`` gives ``["a", "b"]`` on rank 0, ``["c"]`` on rank 1.
        """
        yield _split(inputs, self.process_index, self.num_processes, apply_padding)

    # -- output -----------------------------------------------------------------------------------

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on the main process only."""
        if self.is_main_process:
            print(*args, **kwargs)

    def on_main_process(self, function: Callable[..., _T]) -> Callable[..., _T | None]:
        """Decorator: run ``function`` on the main process only (None elsewhere)."""
        return _run_where(function, self.is_main_process)

    def on_local_main_process(self, function: Callable[..., _T]) -> Callable[..., _T | None]:
        """Decorator: run ``function`` on each node's local main process only (None elsewhere)."""
        return _run_where(function, self.is_local_main_process)

    def on_last_process(self, function: Callable[..., _T]) -> Callable[..., _T | None]:
        """Decorator: run ``function`` on the last process only (None elsewhere)."""
        return _run_where(function, self.state.is_last_process)

    def on_process(self, function: Callable | None = None, process_index: int | None = None) -> Any:
        """Decorator: run ``function`` on process ``process_index`` only (None elsewhere).

        Examples:
            >>> from trainer_core import Accelerator
            >>> accelerator = Accelerator(cpu=True)
            >>> accelerator.on_process(lambda: "here", process_index=0)()
            'here'
        """
        if function is None:
            return functools.partial(self.on_process, process_index=process_index)
        return _run_where(function, self.process_index == process_index)

    def on_local_process(self, function: Callable | None = None, local_process_index: int | None = None) -> Any:
        """Decorator: run ``function`` on local process ``local_process_index`` of each node only."""
        if function is None:
            return functools.partial(self.on_local_process, local_process_index=local_process_index)
        return _run_where(function, self.local_process_index == local_process_index)

    # -- a flag any process can raise, seen by all (stop early when one rank decides to) -----------

    def set_trigger(self) -> None:
        """Raise this process's trigger; the next ``check_trigger()`` is True on every process."""
        self._trigger = True

    def check_trigger(self) -> bool:
        """True on every process when any process called ``set_trigger()`` since the last check
        (a collective: every process must call it); the triggers are reset.

        Examples:
            >>> from trainer_core import Accelerator
            >>> accelerator = Accelerator(cpu=True)
            >>> accelerator.set_trigger(); accelerator.check_trigger(), accelerator.check_trigger()
            (True, False)
        """
        flag = torch.tensor(1.0 if self._trigger else 0.0, device=self.device)
        raised = ops.reduce(self.state, flag, "sum").item() > 0
        self._trigger = False
        return raised


def _run_where(function: Callable[..., _T], here: bool) -> Callable[..., _T | None]:
    """``function`` where ``here`` is true for this process; elsewhere a stand-in returning None."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> _T | None:
        return function(*args, **kwargs) if here else None

    return wrapper


def _split(inputs: Any, rank: int, world: int, apply_padding: bool) -> Any:
    if isinstance(inputs, dict):
        if len({len(value) for value in inputs.values()}) > 1:
            raise ValueError("split_between_processes: every value of the dict must have the same length")
        return {key: _split(value, rank, world, apply_padding) for key, value in inputs.items()}
    size = len(inputs)
    base, extra = divmod(size, world)
    start = rank * base + min(rank, extra)
    end = start + base + (1 if rank < extra else 0)
    if hasattr(inputs, "select") and hasattr(inputs, "column_names"):  # a datasets.Dataset: rows, not columns
        padding = [size - 1] if apply_padding and extra and rank >= extra and size else []
        return inputs.select([*range(start, end), *padding])
    part = inputs[start:end]
    if apply_padding and extra and rank >= extra and size:
        last = inputs[-1:]
        part = torch.cat([part, last]) if isinstance(part, torch.Tensor) else part + type(part)(last)
    return part
