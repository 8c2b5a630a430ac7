"""Prepared optimizers and schedulers: step only on gradient-sync steps, through the fp16 scaler.

Example (gradient_accumulation_steps=2): ``optimizer.step()`` on the first micro-batch does nothing,
on the second it steps; the scheduler steps when the optimizer really stepped, once per process.
"""

from __future__ import annotations

import torch

__all__ = ["PreparedOptimizer", "PreparedScheduler"]


class PreparedOptimizer(torch.optim.Optimizer):
    """Wraps a torch optimizer; everything not overridden is passed through.

    A ``torch.optim.Optimizer`` to ``isinstance`` (as Accelerate's ``AcceleratedOptimizer`` is), so
    a schedule built after ``prepare`` — torch's ``LRScheduler``s, Transformers' ``get_scheduler``,
    the order of Hugging Face's tutorials — takes it; ``Optimizer.__init__`` is not run: the state,
    the groups, the defaults and the hooks are the wrapped optimizer's.

    Examples:
        >>> from trainer_core import Accelerator
        >>> accelerator = Accelerator(cpu=True)
        >>> model = accelerator.prepare(torch.nn.Linear(2, 2))
        >>> optimizer = accelerator.prepare(torch.optim.SGD(model.parameters(), lr=0.1))
        >>> schedule = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.5, total_iters=2)
        >>> isinstance(optimizer, torch.optim.Optimizer), optimizer.param_groups[0]["lr"]
        (True, 0.05)
    """

    def __init__(self, optimizer, accelerator):  # not Optimizer.__init__: the wrapped optimizer holds it all
        self.optimizer = optimizer
        self._accelerator = accelerator
        self.step_was_skipped = False
        self.stepped = False

    @property
    def defaults(self):  # type: ignore[override]  # the wrapped one's
        return self.optimizer.defaults

    def add_param_group(self, param_group):
        self.optimizer.add_param_group(param_group)

    def __getstate__(self):  # Optimizer's keeps only defaults, state and groups: keep the wrapper whole
        return self.__dict__

    def __setstate__(self, state):
        self.__dict__.update(state)

    def __repr__(self):
        return f"PreparedOptimizer({self.optimizer!r})"

    @property
    def param_groups(self):  # type: ignore[override]  # the wrapped one's
        return self.optimizer.param_groups

    @property
    def state(self):  # type: ignore[override]  # the wrapped one's
        return self.optimizer.state

    def state_dict(self):
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict):
        self.optimizer.load_state_dict(state_dict)

    def rebind(self, moved):
        """Point param groups at the parameters that replaced theirs (``moved``: id → (old, new))."""
        for group in self.optimizer.param_groups:
            group["params"] = [moved[id(p)][1] if id(p) in moved else p for p in group["params"]]

    def zero_grad(self, set_to_none=True):
        if self._accelerator.sync_gradients:
            self.optimizer.zero_grad(set_to_none=set_to_none)

    def step(self, closure=None):
        self.stepped = False
        if not self._accelerator.sync_gradients:
            return None
        with self._accelerator._throughput.syncing():
            result, self.step_was_skipped = self._accelerator.precision.step(self.optimizer, closure)
        self.stepped = not self.step_was_skipped
        if self.stepped:
            self._accelerator._after_optimizer_step()
        return result

    def __getattr__(self, name):
        return getattr(self.optimizer, name)


class PreparedScheduler:
    """Steps the wrapped scheduler when its optimizer really stepped, ``per_step`` times (the number
    of processes, as Hugging Face Accelerate does: a schedule sized by the un-prepared loader's
    length ends when training does); ``per_step=0`` steps it once at every call."""

    def __init__(self, scheduler, optimizers, per_step=1):
        self.scheduler = scheduler
        self._optimizers = [opt for opt in optimizers if opt.optimizer is scheduler.optimizer] or optimizers
        self._per_step = per_step

    def step(self, *args, **kwargs):
        if self._per_step == 0:
            self.scheduler.step(*args, **kwargs)
            return
        if self._optimizers and not all(opt.stepped for opt in self._optimizers):
            return
        total = getattr(self.scheduler, "total_steps", None)  # OneCycleLR refuses to step past its end
        for _ in range(self._per_step):
            if total is None or self.scheduler._step_count <= total:
                self.scheduler.step(*args, **kwargs)

    def state_dict(self):
        return self.scheduler.state_dict()

    def load_state_dict(self, state_dict):
        self.scheduler.load_state_dict(state_dict)

    def get_last_lr(self):
        return self.scheduler.get_last_lr()

    def __getattr__(self, name):
        return getattr(self.scheduler, name)
