"""Training-step time on the GPU: hand-written PyTorch, trainer_core and Hugging Face Accelerate,
the same small transformer in fp32, bf16 and fp16, in one rank per GPU launched by notebook_launcher.

In each rank the three loops are built side by side (the same weights, optimizer, data and
precision) and timed in interleaved rounds, in a shuffled order each round, so a clock change or a
neighbour's load falls on all three alike. A round is ``steps`` steps between two CUDA
synchronisations; each loop's figure is the median of its rounds. Target (issue 48): trainer_core
within 1.03x of the hand-written loop, decided like bench/launch_overhead.py: "met" only when the
whole 95% bootstrap interval of the ratio of medians is within it.

The hand-written loop is what a person writes for one process per GPU: ``torch.autocast`` with
the precision's dtype, a ``GradScaler`` for fp16, DistributedDataParallel when there are several
ranks (none in one, as trainer_core and Accelerate do too), batches moved with ``.to(device)``.

Run: python bench/gpu/step.py [--rounds 16] [--json PATH]   (--quick: a tiny model on CPU ranks,
what `make gpu-dry-run` runs to prove the script works)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from statistics import median

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from intervals import bootstrap_interval, verdict

TARGET = 1.03
LOOPS = ("hand-written", "trainer_core", "accelerate")
FULL = {"width": 768, "layers": 6, "heads": 12, "vocab": 8192, "seq": 256, "batch": 64, "steps": 5, "rounds": 16}
QUICK = {"width": 32, "layers": 1, "heads": 2, "vocab": 64, "seq": 16, "batch": 4, "steps": 2, "rounds": 3}


def build_model(size):
    import torch.nn as nn

    class TinyGPT(nn.Module):
        """Token embedding, a pre-norm transformer encoder, a vocabulary head."""

        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(size["vocab"], size["width"])
            layer = nn.TransformerEncoderLayer(
                size["width"], size["heads"], 4 * size["width"], dropout=0.0, batch_first=True, norm_first=True
            )
            self.blocks = nn.TransformerEncoder(layer, size["layers"], enable_nested_tensor=False)
            self.head = nn.Linear(size["width"], size["vocab"])

        def forward(self, tokens):
            return self.head(self.blocks(self.embed(tokens)))

    return TinyGPT()


def batches(size):
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    generator = torch.Generator().manual_seed(0)
    count = size["batch"] * (size["steps"] + 1)
    tokens = torch.randint(0, size["vocab"], (count, size["seq"] + 1), generator=generator)
    return DataLoader(TensorDataset(tokens[:, :-1], tokens[:, 1:]), batch_size=size["batch"], drop_last=True)


def loss_of(model, x, y):
    import torch.nn.functional as F

    return F.cross_entropy(model(x).flatten(0, 1).float(), y.flatten())


class HandWritten:
    """The loop a person writes without a library."""

    def __init__(self, model, precision, device):
        import torch

        self.device = device
        if torch.distributed.get_world_size() > 1:
            ids = [device.index] if device.type == "cuda" else None
            model = torch.nn.parallel.DistributedDataParallel(model.to(device), device_ids=ids)
        self.model = model.to(device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        self.dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
        self.scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")

    def step(self, x, y):
        import torch

        x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
        with torch.autocast(self.device.type, dtype=self.dtype or torch.float32, enabled=self.dtype is not None):
            loss = loss_of(self.model, x, y)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)


class Prepared:
    """trainer_core's or Accelerate's Accelerator, as their tutorials write the loop."""

    def __init__(self, accelerator, model):
        import torch

        self.accelerator = accelerator
        self.model, self.optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-4))

    def step(self, x, y):
        x, y = x.to(self.accelerator.device, non_blocking=True), y.to(self.accelerator.device, non_blocking=True)
        self.accelerator.backward(loss_of(self.model, x, y))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def make_loops(size, precision, device):
    import torch
    from accelerate import Accelerator as AccelerateAccelerator
    from accelerate.state import AcceleratorState

    import trainer_core

    def model():
        torch.manual_seed(0)
        return build_model(size)

    AcceleratorState._reset_state(reset_partial_state=True)  # Accelerate keeps one precision per process
    return {
        "hand-written": HandWritten(model(), precision, device),
        "trainer_core": Prepared(trainer_core.Accelerator(mixed_precision=precision), model()),
        "accelerate": Prepared(AccelerateAccelerator(mixed_precision=precision), model()),
    }


def time_rounds(loops, size, device):
    """Seconds per step of each loop, one figure per round; rounds in a shuffled order."""
    import random
    import time

    import torch

    def synchronize():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    data = list(batches(size))
    for loop in loops.values():  # warm-up: kernels chosen, allocator filled
        for x, y in data[:2]:
            loop.step(x, y)
    times: dict[str, list[float]] = {name: [] for name in loops}
    order = random.Random(0)
    for _ in range(size["rounds"]):
        names = list(loops)
        order.shuffle(names)
        for name in names:
            synchronize()
            start = time.perf_counter()
            for x, y in data[: size["steps"]]:
                loops[name].step(x, y)
            synchronize()
            times[name].append((time.perf_counter() - start) / size["steps"])
    return times


def measure(size, precisions):
    """In a rank: every precision's per-round step times of the three loops, and the device's name."""
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    local = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo")
    results = {}
    for precision in precisions:
        loops = make_loops(size, precision, device)
        results[precision] = time_rounds(loops, size, device)
        del loops
        if cuda:
            torch.cuda.empty_cache()
    name = torch.cuda.get_device_name(device) if cuda else "CPU"
    dist.destroy_process_group()
    return {"device": name, "world_size": int(os.environ["WORLD_SIZE"]), "times": results}


def summarise(data, size):
    """Rows of the table: medians in ms/step, trainer_core's and Accelerate's ratio to hand-written,
    the trainer_core ratio's 95% interval and the verdict."""
    rows = []
    for precision, times in data["times"].items():
        med = {name: median(times[name]) for name in LOOPS}
        pairs = list(zip(times["trainer_core"], times["hand-written"], strict=True))
        interval = bootstrap_interval(pairs, lambda s: median(a for a, _ in s) / median(b for _, b in s))
        rows.append(
            {
                "precision": precision,
                "ms": {name: med[name] * 1000 for name in LOOPS},
                "trainer_core_ratio": med["trainer_core"] / med["hand-written"],
                "accelerate_ratio": med["accelerate"] / med["hand-written"],
                "interval": interval,
                "verdict": verdict(interval, TARGET),
            }
        )
    return rows


def print_table(data, rows, size):
    print(
        f"\nTraining step, a {size['layers']}-layer transformer (width {size['width']}, batch {size['batch']}"
        f" x {size['seq']} tokens), {data['world_size']} rank(s) on {data['device']},"
        f" {size['rounds']} interleaved rounds of {size['steps']} steps (medians, ms/step)\n"
    )
    print(
        f"{'precision':<10}{'hand-written':>14}{'trainer_core':>14}{'accelerate':>12}"
        f"{'trainer_core/hand':>19}{'95% interval':>16}{'accelerate/hand':>17}  target ≤ {TARGET}x"
    )
    for row in rows:
        ms, (low, high) = row["ms"], row["interval"]
        print(
            f"{row['precision']:<10}{ms['hand-written']:>14.2f}{ms['trainer_core']:>14.2f}{ms['accelerate']:>12.2f}"
            f"{row['trainer_core_ratio']:>18.3f}x{low:>9.3f}-{high:.3f}x{row['accelerate_ratio']:>16.3f}x"
            f"  {row['verdict']}"
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--quick", action="store_true", help="a tiny model on one CPU rank (the dry run)")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    from notebook_launcher import launch
    from notebook_launcher.devices.probe import nvml_gpu_count

    gpus = 0 if args.quick else nvml_gpu_count()
    size = dict(QUICK if args.quick or not gpus else FULL)
    if args.rounds:
        size["rounds"] = args.rounds
    precisions = ("no", "bf16", "fp16") if gpus else ("no", "bf16")
    job = launch(measure, (size, precisions), num_processes=max(1, gpus), display="none", timeout=600)
    data = job.wait()
    rows = summarise(data, size)
    print_table(data, rows, size)
    if args.json:
        with open(args.json, "w") as file:
            json.dump({"size": size, "device": data["device"], "world_size": data["world_size"], "rows": rows}, file)


if __name__ == "__main__":
    main()
