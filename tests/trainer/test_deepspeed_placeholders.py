"""A DeepSpeed config's own optimizer and schedule, reached through ``DummyOptim``/``DummyScheduler``
as Accelerate code writes it, on 2 real gloo ranks (ZeRO-2, torch's AdamW: nothing to compile)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from ranks import on_ranks, seeded_order
from test_fsdp import Net, _assert_same_weights, _data
from torch.utils.data import DataLoader

from trainer_core import Accelerator, DeepSpeedPlugin, DummyOptim, DummyScheduler, set_seed
from trainer_core.strategies.deepspeed.placeholders import check_placeholders

pytest.importorskip("deepspeed", reason="the deepspeed extra is not installed")

ADAMW = {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto", "torch_adam": True}}
WARMUP_DECAY = {
    "type": "WarmupDecayLR",
    "params": {
        "warmup_min_lr": "auto",
        "warmup_max_lr": "auto",
        "warmup_num_steps": "auto",
        "total_num_steps": "auto",
        "warmup_type": "linear",
    },
}


def _config(**sections):
    return {
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "gradient_clipping": 0.0,
        "zero_optimization": {"stage": 2},
        **sections,
    }


def train(how, epochs=2):
    """Net for ``epochs`` on 8-sample batches per rank; ``how``: "torch" (a torch AdamW, no DeepSpeed
    config optimizer), "dummy" (the config's AdamW through DummyOptim), "accelerate-dummy" (the same
    with Accelerate's DummyOptim), "schedule" (and the config's WarmupDecayLR through DummyScheduler),
    "callable" (a StepLR that DummyScheduler's lr_scheduler_callable builds). Rank 0 returns the full
    weights, the learning rate seen at each step and the prepared objects' class names."""
    set_seed(7)
    sections = {} if how == "torch" else {"optimizer": ADAMW}
    if how == "schedule":
        sections["scheduler"] = WARMUP_DECAY
    accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=_config(**sections)))
    model = Net()
    loader = DataLoader(_data(), batch_size=8, shuffle=True, generator=seeded_order())
    if how == "torch":
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.1)
    elif how == "accelerate-dummy":
        from accelerate.utils import DummyOptim as AccelerateDummyOptim

        optimizer = AccelerateDummyOptim(model.parameters(), lr=0.01, weight_decay=0.1)
    else:
        optimizer = DummyOptim(model.parameters(), lr=0.01, weight_decay=0.1)
    objects = [model, optimizer, loader]
    if how == "schedule":  # 4 steps per epoch per rank: warm up over 2, decay to 0 at 8 (16 over both ranks)
        objects.append(DummyScheduler(optimizer, total_num_steps=16, warmup_num_steps=2))
    if how == "callable":
        objects.append(DummyScheduler(optimizer, lr_scheduler_callable=lambda built: _halving(built)))
    model, optimizer, loader, *scheduler = accelerator.prepare(*objects)
    rates = []
    for _ in range(epochs):
        for x, y in loader:
            rates.append(optimizer.param_groups[0]["lr"])
            accelerator.backward(F.cross_entropy(model(x), y))
            optimizer.step()
            for each in scheduler:
                each.step()  # the engine steps the schedule itself: this must not step it again
            optimizer.zero_grad()
    classes = [type(obj).__name__ for obj in (model, optimizer, *scheduler)]
    return {"weights": accelerator.get_state_dict(model), "rates": rates, "classes": classes}


def _halving(optimizer):
    return torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)


def test_dummy_optim_trains_with_the_configs_optimizer_as_with_the_same_torch_optimizer():
    """The config's AdamW (lr and weight decay "auto", filled from DummyOptim) reaches the weights of
    the same torch AdamW passed to prepare; Accelerate's own DummyOptim works the same."""
    reference = on_ranks(train, "torch")[0]
    for how in ("dummy", "accelerate-dummy"):
        result = on_ranks(train, how)[0]
        _assert_same_weights(reference["weights"], result["weights"], atol=1e-6)
        assert result["rates"] == [0.01] * 8
        assert result["classes"][:2] == ["DeepSpeedEngine", "PreparedOptimizer"]


def test_dummy_scheduler_fills_the_configs_schedule_and_the_engine_steps_it_once():
    """WarmupDecayLR from the config: warm-up from 0 to DummyOptim's lr over DummyScheduler's 2 steps,
    then down to 0 at its total steps per process (16 over 2 ranks: 8), as Accelerate fills them;
    the loop's own scheduler.step() adds no step. With lr_scheduler_callable the engine steps the
    StepLR the callable built: the rate halves once per step."""
    rates = on_ranks(train, "schedule")[0]["rates"]
    schedule = [0.0, 0.005] + [0.01 * (8 - step) / 6 for step in range(2, 8)]
    expected = [0.0, *schedule[:-1]]  # a step runs at the rate the engine's previous step set (DeepSpeed's order)
    torch.testing.assert_close(
        torch.tensor(rates, dtype=torch.float64), torch.tensor(expected, dtype=torch.float64), atol=1e-9, rtol=0
    )
    halving = on_ranks(train, "callable", 1)[0]
    torch.testing.assert_close(
        torch.tensor(halving["rates"], dtype=torch.float64), 0.01 * 0.5 ** torch.arange(4.0, dtype=torch.float64)
    )
    assert halving["classes"][2] == "EngineScheduler"


def step_save_step_load_step(folder):
    """Three steps of the config's AdamW and WarmupDecayLR, save_state, a step on a fixed batch,
    load_state, the same step again: rank 0 returns (rate, full weights) after each of those two steps."""
    set_seed(3)
    config = _config(optimizer=ADAMW, scheduler=WARMUP_DECAY)
    accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=config))
    model = Net()
    optimizer = DummyOptim(model.parameters(), lr=0.01)
    scheduler = DummyScheduler(optimizer, total_num_steps=20, warmup_num_steps=4)
    loader = DataLoader(_data(), batch_size=8)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    batches = iter(loader)
    x, y = next(batches)

    def step():
        accelerator.backward(F.cross_entropy(model(x), y))
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        return scheduler.get_last_lr()[0], accelerator.get_state_dict(model)

    for _ in range(3):
        step()
    accelerator.save_state(folder)
    after_save = step()
    accelerator.load_state(folder)
    return after_save, step()


def test_a_config_optimizer_and_schedule_resume_from_save_state(tmp_path):
    """The engine's checkpoint keeps the config's optimizer and schedule: a step taken after
    load_state repeats the step taken after save_state, rate and weights."""
    (rate, weights), (rate_again, weights_again) = on_ranks(step_save_step_load_step, str(tmp_path))[0]
    assert rate == rate_again == pytest.approx(0.01 * 3 / 4)  # after 4 steps: 3/4 of the way up the warm-up
    _assert_same_weights(weights, weights_again, atol=0)


def test_placeholders_without_what_they_stand_for_are_refused():
    """As Accelerate refuses them, with what to do instead."""
    params = list(Net().parameters())
    with pytest.raises(ValueError, match='this config has no "optimizer" section'):
        check_placeholders(_config(), DummyOptim(params), None)
    with pytest.raises(ValueError, match=r"names an optimizer .* and prepare\(\) was given one too"):
        check_placeholders(_config(optimizer=ADAMW), torch.optim.SGD(params, lr=0.1), None)
    with pytest.raises(ValueError, match=r"names a schedule .* and prepare\(\) was given one too"):
        optimizer = DummyOptim(params)
        check_placeholders(
            _config(optimizer=ADAMW, scheduler=WARMUP_DECAY), optimizer, _halving(torch.optim.SGD(params, lr=0.1))
        )
    with pytest.raises(ValueError, match=r"lr_scheduler_callable=\) a function"):
        check_placeholders(_config(optimizer=ADAMW), DummyOptim(params), DummyScheduler(DummyOptim(params)))
    with pytest.raises(ValueError, match="DummyScheduler goes with DummyOptim"):
        torch_optimizer = torch.optim.SGD(params, lr=0.1)
        check_placeholders(_config(), torch_optimizer, DummyScheduler(torch_optimizer, lr_scheduler_callable=_halving))
    accelerator = Accelerator(cpu=True)  # no DeepSpeed
    with pytest.raises(ValueError, match="DummyOptim stands for what a DeepSpeed config names"):
        accelerator.prepare(Net(), DummyOptim(params))
