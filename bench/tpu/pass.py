"""The TPU pass: what this project checks on a TPU machine (Colab v5e-1, Kaggle v5e-8/v6e-8/v3-8,
a Cloud TPU VM), in one call, into one report.

    python bench/tpu/pass.py REPORT_DIR          (or: make tpu-pass REPORT=DIR)
    TPU_PASS_DEVICE=cpu python bench/tpu/pass.py REPORT_DIR   (the dry run: make tpu-dry-run)

It records the host's facts (torch, torch_tpu or torch_xla and their versions, the chips found
without touching them, the device a launch picks), then launches a training function on every chip
from this process, as a notebook cell would: trainer_core's Accelerator with bf16 on the TPU, a
small classifier on scikit-learn's digits, gather, save_state and load_state. It checks that the
loss fell, that gather saw every rank's batch and that the reloaded weights are the saved ones.
Writes REPORT_DIR/report.json and report.md; exits non-zero when a check failed. Run it under
bench/gpu/contained.py (the Makefile does) so that whatever it leaves running is ended, and nothing else.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

STEPS = 30


def train(checkpoints, mixed_precision):
    """One rank: a few steps on digits, a gather, a save and a load; what it saw, for the checks."""
    import torch
    from sklearn.datasets import load_digits

    from trainer_core import Accelerator

    accelerator = Accelerator(mixed_precision=mixed_precision)
    torch.manual_seed(0)
    digits = load_digits()
    features = torch.tensor(digits.data, dtype=torch.float32) / 16
    labels = torch.tensor(digits.target)
    data = torch.utils.data.TensorDataset(features, labels)
    loader = torch.utils.data.DataLoader(data, batch_size=64, shuffle=True)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    losses = []
    batches = iter(loader)
    for _ in range(STEPS):
        try:
            x, y = next(batches)
        except StopIteration:
            batches = iter(loader)
            x, y = next(batches)
        with accelerator.autocast():
            loss = torch.nn.functional.cross_entropy(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(accelerator.gather(loss.detach().float().reshape(1)).mean().item())
    gathered = accelerator.gather(y).numel()
    accelerator.save_state(checkpoints)
    saved = [p.detach().float().cpu().clone() for p in model.parameters()]
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    accelerator.load_state(checkpoints)
    reloaded = all(torch.equal(a, p.detach().float().cpu()) for a, p in zip(saved, model.parameters(), strict=True))
    return {
        "rank": accelerator.process_index,
        "world": accelerator.num_processes,
        "device": str(accelerator.device),
        "first_loss": losses[0],
        "last_loss": sum(losses[-5:]) / 5,
        "gathered": gathered,
        "batch": y.numel(),
        "reloaded": reloaded,
    }


def _version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def facts():
    from notebook_launcher.devices import select_device
    from notebook_launcher.devices.probe import tpu_chips, tpu_cores, xla_platform

    device = select_device(os.environ.get("TPU_PASS_DEVICE", "auto"))
    return {
        "python": sys.version.split()[0],
        "torch": _version("torch"),
        "torch_tpu": _version("torch_tpu"),
        "torch_xla": _version("torch_xla"),
        "notebook_launcher": _version("notebook-launcher"),
        "chips (PCI, VFIO)": tpu_chips(),
        "TPU cores (type)": list(tpu_cores()),
        "XLA platform": xla_platform(),
        "device": device.name,
        "devices found": device.describe(),
    }


def checks(found, ranks):
    """(check, passed, detail) for what the ranks returned."""
    world = found[0]["world"] if found else 0
    return [
        ("every rank returned", len(found) == ranks and world == ranks, f"{len(found)} of {ranks}"),
        (
            "the loss fell",
            all(r["last_loss"] < r["first_loss"] for r in found),
            [(r["first_loss"], r["last_loss"]) for r in found],
        ),
        (
            "gather saw every rank's batch",
            all(r["gathered"] == r["batch"] * world for r in found),
            [r["gathered"] for r in found],
        ),
        ("load_state brought the saved weights back", all(r["reloaded"] for r in found), None),
        (
            "each rank on its own device",
            len({r["device"] for r in found}) == len(found) or found[0]["device"] == "cpu",
            [r["device"] for r in found],
        ),
    ]


def main(report_dir):
    from notebook_launcher import launch

    report_dir = Path(report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    device = os.environ.get("TPU_PASS_DEVICE", "auto")
    result = {"facts": facts(), "checks": [], "error": None}
    on_tpu = result["facts"]["device"] in ("tpu", "xla")
    ranks = None if on_tpu else 2
    precision = "bf16" if on_tpu else "no"
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="tpu-pass-") as checkpoints:
            job = launch(
                train, (checkpoints, precision), num_processes=ranks, device=device, display="text", timeout=900
            )
            job.wait()
            found = [r for r in job.results if r is not None]
            result["checks"] = [list(c) for c in checks(found, job.plan.num_processes)]
            result["ranks"] = found
    except Exception:
        result["error"] = traceback.format_exc()
    result["seconds"] = round(time.monotonic() - started, 1)
    passed = result["error"] is None and all(ok for _, ok, _ in result["checks"])
    result["passed"] = passed
    (report_dir / "report.json").write_text(json.dumps(result, indent=1, default=str))
    lines = [
        "# TPU pass",
        "",
        f"**{'passed' if passed else 'FAILED'}** in {result['seconds']} s",
        "",
        "| fact | value |",
        "|---|---|",
    ]
    lines += [f"| {k} | {v} |" for k, v in result["facts"].items()]
    lines += ["", "| check | passed | detail |", "|---|---|---|"]
    lines += [f"| {name} | {'yes' if ok else 'NO'} | {detail} |" for name, ok, detail in result["checks"]]
    if result["error"]:
        lines += ["", "```", result["error"], "```"]
    (report_dir / "report.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "build/tpu-pass"))
