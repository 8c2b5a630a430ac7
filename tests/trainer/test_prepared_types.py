"""What ``prepare`` returns passes the ``isinstance`` checks users and libraries make on what
Hugging Face Accelerate's returns, and a schedule built after ``prepare`` (the order of Hugging
Face's example notebook and its course's "full training" chapter) takes the prepared optimizer."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from ranks import on_ranks
from torch.optim.lr_scheduler import LRScheduler
from torch.utils.data import DataLoader, TensorDataset

from trainer_core import Accelerator

CHECKS = {"module": nn.Module, "optimizer": torch.optim.Optimizer, "data loader": DataLoader, "scheduler": LRScheduler}


def _prepared(accelerator):
    model = nn.Linear(4, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    loader = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=2)
    schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    prepared = accelerator.prepare(model, optimizer, loader, schedule)
    return dict(zip(("module", "optimizer", "data loader", "scheduler"), prepared, strict=True))


def test_each_prepared_object_answers_isinstance_as_accelerates_does(fresh_accelerate_state):
    from accelerate import Accelerator as AccelerateAccelerator

    theirs = _prepared(AccelerateAccelerator(cpu=True))
    fresh_accelerate_state._reset_state(reset_partial_state=True)
    ours = _prepared(Accelerator(cpu=True))
    for name, kind in CHECKS.items():
        for other in CHECKS.values():
            assert isinstance(ours[name], other) == isinstance(theirs[name], other), (name, other)
        assert isinstance(ours[name], kind) == (name != "scheduler")  # Accelerate's scheduler is not one either
    assert len(ours["data loader"]) == 4 and ours["data loader"].num_workers == 0  # the loader's own attributes


def tutorial_order(schedule):
    """Hugging Face's order: prepare, then build the schedule on the prepared optimizer; the lr after
    each step, next to a plain optimizer's under the same schedule."""
    from transformers import get_linear_schedule_with_warmup, get_scheduler

    builders = {
        "get_linear_schedule_with_warmup": lambda opt, steps: get_linear_schedule_with_warmup(opt, 2, steps),
        "get_scheduler": lambda opt, steps: get_scheduler("linear", opt, num_warmup_steps=2, num_training_steps=steps),
        "OneCycleLR": lambda opt, steps: torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.01, total_steps=steps),
    }
    build = builders[schedule]
    accelerator = Accelerator()
    model = nn.Linear(4, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 2)), batch_size=4)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    steps = 2 * len(loader)
    scheduler = build(optimizer, steps)
    plain = torch.optim.AdamW(nn.Linear(4, 2).parameters(), lr=0.01)
    plain_scheduler = build(plain, steps)
    seen, expected = [], []
    for _ in range(2):
        for x, y in loader:
            accelerator.backward(F.mse_loss(model(x), y))
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            plain.step()
            plain_scheduler.step()
            seen.append(optimizer.param_groups[0]["lr"])
            expected.append(plain.param_groups[0]["lr"])
    return seen, expected


@pytest.mark.parametrize("schedule", ["get_linear_schedule_with_warmup", "get_scheduler", "OneCycleLR"])
def test_a_schedule_built_after_prepare_steps_the_prepared_optimizer(schedule):
    for seen, expected in on_ranks(tutorial_order, schedule):
        assert len(seen) == 8 and seen == pytest.approx(expected)
