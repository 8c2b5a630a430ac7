"""Sharded training: step time and per-rank memory, DDP vs FSDP2 vs ZeRO-3, trainer_core vs
hand-written vs Accelerate.

The same model (an MLP of residual blocks, ~4.2 M parameters) and Adam on 2 CPU ranks over gloo,
launched with notebook_launcher; each row trains ``--steps`` steps after 3 warm-up steps.
Columns: the median step time; the bytes each rank holds of parameters and optimizer state (Adam's
moments and any fp32 master copy; ``trainer_core.memory.held_bytes``, each storage once) and that
against the ideal, DDP's divided by N; the gradient bytes still held after the step (DeepSpeed
frees its gradient partitions at the step, the others keep ``.grad``). Rows: trainer_core with DDP,
FSDP2 (every block a unit) and DeepSpeed ZeRO-3; hand-written ``fully_shard`` and
``deepspeed.initialize``; Hugging Face Accelerate given its FSDP2 and its DeepSpeed plugins (which
it ignores on CPUs: it trains with DDP, so the rows show what its users get here).

Targets (issue 22): FSDP2's and ZeRO-3's memory per rank within 1.2x of the ideal; step times
within 1.1x of the hand-written ones. One launch's step time swung from 0.96x to 1.56x of the
hand-written one between runs here, so the step-time targets are decided as bench/launch_overhead.py
decides its own: trainer_core and the hand-written code are launched in turn, ``--rounds`` times in
a shuffled order, and "met" means the whole 95% bootstrap interval of the ratio of medians is
within the target ("not decided" when it holds the target).

Run: .venv/bin/python bench/sharded_training.py [--steps 20] [--rounds 10]
"""

from __future__ import annotations

import argparse
import os
import random
import time
from statistics import median
from typing import Any

import torch
import torch.nn as nn
from intervals import bootstrap_interval, verdict

from notebook_launcher import launch

STEP_TARGET = 1.10

WIDTH, DEPTH, BATCH = 1024, 4, 32


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.linear(x))


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(*[Block() for _ in range(DEPTH)])


DEEPSPEED_CONFIG = {
    "train_micro_batch_size_per_gpu": BATCH,
    "gradient_clipping": 0.0,
    "zero_optimization": {"stage": 3},
}


def _held(model: Any, optimizer: Any) -> tuple[int, int]:
    """(parameter + optimizer bytes, gradient bytes) this rank holds."""
    from trainer_core.memory import held_bytes

    held = held_bytes([model], [optimizer])
    return held["parameters"] + held["optimizer"], held["gradients"]


def _timed(step, steps: int) -> float:
    for _ in range(3):
        step()
    times = []
    for _ in range(steps):
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    return median(times)


def _prepared_steps(accelerator: Any, steps: int) -> tuple[float, tuple[int, int]]:
    """Step time and bytes held, for the model and Adam prepared by ``accelerator`` (ours or Accelerate's)."""
    model = _model()
    model, optimizer = accelerator.prepare(model, torch.optim.Adam(model.parameters(), lr=1e-3))
    x = torch.randn(BATCH, WIDTH)

    def step() -> None:
        accelerator.backward(model(x).square().mean())
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)

    return _timed(step, steps), _held(model, optimizer.optimizer)


def with_trainer_core(sharding: str, steps: int) -> tuple[float, tuple[int, int]]:
    from trainer_core import Accelerator, DeepSpeedPlugin, FullyShardedDataParallelPlugin

    plugins = {
        "ddp": {},
        "fsdp": {"fsdp_plugin": FullyShardedDataParallelPlugin(transformer_cls_names_to_wrap=["Block"])},
        "zero3": {"deepspeed_plugin": DeepSpeedPlugin(hf_ds_config=DEEPSPEED_CONFIG)},
    }
    return _prepared_steps(Accelerator(**plugins[sharding]), steps)


def deepspeed_by_hand(steps: int) -> tuple[float, tuple[int, int]]:
    import deepspeed

    model = _model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    config = {**DEEPSPEED_CONFIG, "zero_allow_untested_optimizer": True, "steps_per_print": 10**9}
    engine, engine_optimizer, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    x = torch.randn(BATCH, WIDTH)

    def step() -> None:
        engine.backward(engine(x).square().mean())
        engine.step()

    return _timed(step, steps), _held(engine, engine_optimizer)


def by_hand(steps: int) -> tuple[float, tuple[int, int]]:
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("gloo")
    model = _model()
    for block in model:
        fully_shard(block)
    fully_shard(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(BATCH, WIDTH)

    def step() -> None:
        model(x).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)

    seconds = _timed(step, steps)
    held = _held(model, optimizer)
    dist.destroy_process_group()
    return seconds, held


def with_accelerate(sharding: str, steps: int) -> tuple[float, tuple[int, int]]:
    from accelerate import Accelerator
    from accelerate.utils import DeepSpeedPlugin, FullyShardedDataParallelPlugin

    if sharding == "fsdp":
        plugins: dict = {
            "fsdp_plugin": FullyShardedDataParallelPlugin(fsdp_version=2, transformer_cls_names_to_wrap=["Block"])
        }
    else:
        plugins = {"deepspeed_plugin": DeepSpeedPlugin(hf_ds_config=dict(DEEPSPEED_CONFIG))}
    accelerator = Accelerator(cpu=True, **plugins)
    measured = _prepared_steps(accelerator, steps)
    accelerator.end_training()
    return measured


def _launched(function: Any, args: tuple) -> list:
    job = launch(function, args, num_processes=2, display="none")
    job.wait(timeout=600)
    return job.results


def _slowest(per_rank: list) -> float:
    """A launch's step time: its slowest rank's median (the others wait for it at each step)."""
    return max(result[0] for result in per_rank)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=10, help="launches of each compared row, interleaved")
    options = parser.parse_args()
    steps = options.steps
    rows = {
        "trainer_core DDP": (with_trainer_core, ("ddp", steps)),
        "trainer_core FSDP2": (with_trainer_core, ("fsdp", steps)),
        "hand-written fully_shard": (by_hand, (steps,)),
        "trainer_core DeepSpeed ZeRO-3": (with_trainer_core, ("zero3", steps)),
        "hand-written deepspeed.initialize ZeRO-3": (deepspeed_by_hand, (steps,)),
        "accelerate FSDP2 plugin (DDP on CPU)": (with_accelerate, ("fsdp", steps)),
        "accelerate DeepSpeed plugin (DDP on CPU)": (with_accelerate, ("zero3", steps)),
    }
    results = {name: _launched(*row) for name, row in rows.items()}
    ideal = results["trainer_core DDP"][0][1][0] / 2
    print(f"2 CPU ranks, {DEPTH} blocks of {WIDTH}x{WIDTH}, batch {BATCH}/rank, Adam, median of {steps} steps")
    print(f"{'':44}{'step (ms)':>10}{'params+optim MB':>17}{'x ideal 1/N':>13}{'grads MB':>10}")
    for name, per_rank in results.items():
        held = max(result[1][0] for result in per_rank)
        grads = max(result[1][1] for result in per_rank)
        step = _slowest(per_rank) * 1e3
        print(f"{name:44}{step:>10.1f}{held / 2**20:>17.1f}{held / ideal:>13.2f}{grads / 2**20:>10.1f}")

    order = random.Random(0)
    print(
        f"\nstep time, trainer_core / hand-written, {options.rounds} interleaved launches of each"
        f" (target ≤ {STEP_TARGET})"
    )
    for label, ours, theirs in (
        ("FSDP2", "trainer_core FSDP2", "hand-written fully_shard"),
        ("DeepSpeed ZeRO-3", "trainer_core DeepSpeed ZeRO-3", "hand-written deepspeed.initialize ZeRO-3"),
    ):
        times = {ours: [_slowest(results[ours])], theirs: [_slowest(results[theirs])]}
        for _ in range(options.rounds - 1):
            names = [ours, theirs]
            order.shuffle(names)
            for name in names:
                times[name].append(_slowest(_launched(*rows[name])))
        pairs = list(zip(times[ours], times[theirs], strict=True))
        low, high = bootstrap_interval(pairs, lambda s: median(a for a, _ in s) / median(b for _, b in s))
        ratio = median(times[ours]) / median(times[theirs])
        print(
            f"  {label}: {ratio:.2f}x (95% interval {low:.2f}-{high:.2f}x; launches {min(a / b for a, b in pairs):.2f}x"
            f" to {max(a / b for a, b in pairs):.2f}x) -> {verdict((low, high), STEP_TARGET)}"
        )


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
