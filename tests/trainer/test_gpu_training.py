"""trainer_core on real GPU ranks (marked ``gpu``; skipped without one): mixed precision, clipping,
exact metrics, checkpoints with the CUDA generator, and sharding where there are GPUs to shard over.

One rank per GPU, forked from this pytest process (which never initialises CUDA itself: GPUs are
counted through NVML). On a one-GPU machine the world size is 1 on NCCL; sharding needs two GPUs.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from ranks import on_ranks
from torch.utils.data import DataLoader, TensorDataset

from trainer_core import Accelerator, set_seed

pytestmark = pytest.mark.gpu


def gpus():
    return torch.cuda.device_count()  # NVML: notebook_launcher (imported by ranks) set the check


def on_gpus(function, *args):
    return on_ranks(function, *args, num_processes=gpus(), device="cuda", start_method="fork")


def fp16_overflow_then_a_clipped_step():
    """A first step whose fp16 gradients overflow, then a normal one clipped to a tiny norm."""
    set_seed(0)
    accelerator = Accelerator(mixed_precision="fp16")
    model = accelerator.prepare(nn.Linear(4, 2))
    optimizer = accelerator.prepare(torch.optim.SGD(model.parameters(), lr=0.1))
    x = 0.1 * torch.randn(8, 4, device=accelerator.device)
    before = model.weight.detach().clone()
    scale = accelerator.scaler.get_scale()
    accelerator.backward(model(x).sum() * 1e30)  # finite in fp32, inf once the fp16 backward sees it
    optimizer.step()
    overflow = (optimizer.step_was_skipped, torch.equal(before, model.weight), accelerator.scaler.get_scale() / scale)
    optimizer.zero_grad()

    reference = nn.Linear(4, 2).to(accelerator.device)
    reference.load_state_dict(accelerator.unwrap_model(model).state_dict())
    reference(x).pow(2).mean().backward()
    expected_norm = torch.cat([p.grad.flatten() for p in reference.parameters()]).norm().item()
    output = model(x)
    accelerator.backward(output.pow(2).mean())
    norm = float(accelerator.clip_grad_norm_(model.parameters(), max_norm=1e-3))
    kept = model.weight.detach().clone()
    optimizer.step()
    moved = (model.weight - kept).norm().item()
    return overflow, str(output.dtype), norm, expected_norm, optimizer.step_was_skipped, moved


def test_fp16_skips_an_overflowing_step_and_clips_the_unscaled_gradients():
    for overflow, dtype, norm, expected_norm, skipped, moved in on_gpus(fp16_overflow_then_a_clipped_step):
        assert overflow == (True, True, 0.5)  # skipped, weights untouched, scale halved
        assert dtype == "torch.float32"  # outputs come back in fp32 for the loss
        assert norm == pytest.approx(expected_norm, rel=2e-2)  # measured on unscaled gradients
        assert not skipped and 0 < moved <= 0.1 * 1e-3 + 1e-6


def bf16_and_fp32_losses():
    """The same 30 steps in fp32 and in bf16; the dtype the bf16 forward computed in."""
    seen = []
    losses = {}
    for precision in ("no", "bf16"):
        set_seed(3)
        accelerator = Accelerator(mixed_precision=precision)
        model = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 4))
        model[0].register_forward_hook(lambda module, args, out: seen.append(str(out.dtype)))
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(256, 32, generator=generator)
        y = (x @ torch.randn(32, 4, generator=generator)).argmax(-1)  # a rule the model can learn
        data = TensorDataset(x, y)
        model, optimizer, loader = accelerator.prepare(model, optimizer, DataLoader(data, batch_size=32))
        losses[precision] = []
        for _ in range(4):
            for x, y in loader:
                loss = F.cross_entropy(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
                losses[precision].append(loss.item())
    return losses, seen[-1], accelerator.device.type


def test_bf16_autocast_on_the_gpu_trains_close_to_fp32():
    for losses, dtype, device in on_gpus(bf16_and_fp32_losses):
        assert device == "cuda" and dtype == "torch.bfloat16"
        assert losses["bf16"][-1] < 0.6 * losses["bf16"][0]  # it learns
        assert losses["bf16"][-1] == pytest.approx(losses["no"][-1], abs=0.05)


def gathered_eval():
    """Every rank's eval predictions, gathered for metrics from an uneven dataset of 37 samples."""
    accelerator = Accelerator()
    loader = accelerator.prepare(DataLoader(TensorDataset(torch.arange(37.0)), batch_size=4))
    gathered = []
    for (batch,) in loader:
        assert batch.device.type == "cuda"
        gathered.append(accelerator.gather_for_metrics(batch * 2))
    return torch.cat(gathered).tolist(), accelerator.num_processes


def test_gather_for_metrics_gives_exactly_the_datasets_samples_on_gpus():
    for values, world in on_gpus(gathered_eval):
        assert world == gpus()
        assert values == [2.0 * i for i in range(37)]


def checkpoint_with_the_cuda_generator(directory):
    """save_state, draw from the CUDA generator and step; load_state; the same draws and weights."""
    set_seed(5)
    accelerator = Accelerator(mixed_precision="fp16")
    model = accelerator.prepare(nn.Linear(8, 8))
    optimizer = accelerator.prepare(torch.optim.Adam(model.parameters(), lr=0.1))
    accelerator.save_state(directory)
    saved = {k: v.clone() for k, v in accelerator.unwrap_model(model).state_dict().items()}
    first = torch.rand(4, device=accelerator.device).tolist()
    accelerator.backward(model(torch.randn(2, 8, device=accelerator.device)).sum())
    optimizer.step()
    accelerator.load_state(directory)
    second = torch.rand(4, device=accelerator.device).tolist()
    restored = accelerator.unwrap_model(model).state_dict()
    same = all(torch.equal(saved[k], restored[k]) for k in saved)
    return first, second, same, restored["weight"].device.type


def test_save_and_load_state_restore_weights_and_the_cuda_generator(tmp_path):
    for first, second, same, device in on_gpus(checkpoint_with_the_cuda_generator, str(tmp_path / "state")):
        assert first == second and same and device == "cuda"


needs_two = pytest.mark.skipif(
    torch.cuda.device_count() < 2, reason="sharding over GPUs needs two (NCCL runs one rank per GPU)"
)


@needs_two
def test_fsdp2_on_gpus_reaches_the_weights_of_one_process():
    from test_fsdp import _assert_same_weights, train

    one = on_ranks(train, False, 16, num_processes=1, device="cpu")[0]
    sharded = on_ranks(train, True, 8, num_processes=2, device="cuda", start_method="fork")[0]
    assert sharded["strategy"] == "fsdp"
    _assert_same_weights({k: v.cpu() for k, v in sharded["weights"].items()}, one["weights"], atol=1e-4)


@needs_two
def test_zero3_on_gpus_reaches_the_weights_of_one_process():
    pytest.importorskip("deepspeed", reason="the deepspeed extra is not installed")
    from test_deepspeed import NO_CLIPPING
    from test_deepspeed import train as zero_train
    from test_fsdp import _assert_same_weights

    one = on_ranks(zero_train, None, 16, num_processes=1, device="cpu")[0]
    zero = on_ranks(zero_train, {"zero_stage": 3, **NO_CLIPPING}, 8, num_processes=2, device="cuda")[0]
    _assert_same_weights({k: v.cpu() for k, v in zero["weights"].items()}, one["weights"], atol=1e-4)
