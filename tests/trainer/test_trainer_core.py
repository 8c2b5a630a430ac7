"""trainer_core on real gloo ranks: equivalence with one process, exact metrics, resumable checkpoints."""

from __future__ import annotations

import os
import signal

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from ranks import on_ranks, seeded_order
from torch.utils.data import DataLoader, Dataset, IterableDataset, TensorDataset

from trainer_core import Accelerator, set_seed

# ---------------------------------------------------------------------------------- helpers


def _data(n=64, features=6, classes=3):
    generator = torch.Generator().manual_seed(1234)
    x = torch.randn(n, features, generator=generator)
    y = torch.randint(0, classes, (n,), generator=generator)
    return TensorDataset(x, y)


def _model():
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))


def train_weights(batch_size, epochs, accumulation=1, mixed_precision="no"):
    """Train the small model; return (final weights, per-step losses) from this rank."""
    set_seed(7)
    accelerator = Accelerator(gradient_accumulation_steps=accumulation, mixed_precision=mixed_precision)
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    loader = DataLoader(_data(), batch_size=batch_size, shuffle=True, generator=seeded_order())
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    losses = []
    for _ in range(epochs):
        for x, y in loader:
            with accelerator.accumulate(model):
                loss = F.cross_entropy(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
            losses.append(accelerator.reduce(loss.detach(), "mean").item())
    weights = {k: v.clone() for k, v in accelerator.unwrap_model(model).state_dict().items()}
    return weights, losses


def _assert_same_weights(a, b, atol):
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=atol, rtol=0)


# ---------------------------------------------------------------------------------- equivalence


def test_two_ranks_batch_b_equal_one_rank_batch_2b():
    """Same data order, global batch 16 both ways; tolerance 1e-5 (only summation order differs)."""
    single = on_ranks(train_weights, 16, 3, num_processes=1)[0]
    double = on_ranks(train_weights, 8, 3, num_processes=2)
    _assert_same_weights(double[0][0], double[1][0], atol=0)
    _assert_same_weights(single[0], double[0][0], atol=1e-5)
    assert not torch.equal(single[0]["0.weight"], _model().state_dict()["0.weight"])


def test_gradient_accumulation_equals_the_larger_batch():
    """2 ranks × batch 8 × 2 accumulation steps = 1 rank × batch 32; tolerance 1e-5."""
    single = on_ranks(train_weights, 32, 2, num_processes=1)[0]
    accumulated = on_ranks(train_weights, 8, 2, 2, num_processes=2)[0]
    _assert_same_weights(single[0], accumulated[0], atol=1e-5)


def test_bf16_autocast_on_cpu_trains_close_to_fp32():
    """bf16 keeps ~3 significant digits: per-step losses within 2% of fp32's."""
    fp32 = on_ranks(train_weights, 8, 2, 1, "no", num_processes=2)[0][1]
    bf16 = on_ranks(train_weights, 8, 2, 1, "bf16", num_processes=2)[0][1]
    assert len(fp32) == len(bf16) == 8
    for a, b in zip(fp32, bf16, strict=False):
        assert abs(a - b) <= 0.02 * abs(a)


# ---------------------------------------------------------------------------------- gather_for_metrics


class _Indexed(Dataset):
    """scikit-learn's digits (1797 samples), each sample carrying its index."""

    def __init__(self):
        from sklearn.datasets import load_digits

        digits = load_digits()
        self.x = torch.tensor(digits.data, dtype=torch.float32)
        self.y = torch.tensor(digits.target)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i], i


def gathered_indices(use_objects):
    accelerator = Accelerator()
    loader = accelerator.prepare(DataLoader(_Indexed(), batch_size=64))
    seen = []
    for _, _, index in loader:
        if use_objects:
            seen += accelerator.gather_for_metrics([f"s{int(i)}" for i in index])
        else:
            seen += accelerator.gather_for_metrics(index).tolist()
    return len(loader), seen == ([f"s{i}" for i in range(1797)] if use_objects else list(range(1797))), len(seen)


def test_gather_for_metrics_two_ranks_exactly_the_dataset_in_order():
    steps, in_order, count = on_ranks(gathered_indices, False, num_processes=2)[0]
    assert (steps, count, in_order) == (15, 1797, True)


def test_gather_for_metrics_three_ranks_tensors_and_objects():
    for rank_result in on_ranks(gathered_indices, False, num_processes=3):
        assert rank_result == (10, True, 1797)
    assert on_ranks(gathered_indices, True, num_processes=3)[0] == (10, True, 1797)


class _Stream(IterableDataset):
    def __iter__(self):
        return iter(range(50))


def gathered_stream():
    accelerator = Accelerator()
    loader = accelerator.prepare(DataLoader(_Stream(), batch_size=8))
    seen = []
    for batch in loader:
        seen += accelerator.gather_for_metrics(batch).tolist()
    return sorted(seen) == list(range(50)), len(seen)


def test_iterable_dataset_is_sharded_and_gathered_without_duplicates():
    assert on_ranks(gathered_stream, num_processes=2) == [(True, 50), (True, 50)]


# ---------------------------------------------------------------------------------- checkpoints


def resumable_training(ckpt, phase):
    """phase "full": 2 epochs. "first": 1 epoch, save, then rank 1 dies. "resume": load, 1 epoch."""
    set_seed(3)
    accelerator = Accelerator()
    model = nn.Sequential(nn.Linear(6, 16), nn.Dropout(0.3), nn.Linear(16, 3))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
    loader = DataLoader(_data(), batch_size=8, shuffle=True)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    epochs = range(2)
    if phase == "resume":
        accelerator.load_state(ckpt)
        epochs = range(1, 2)
    for epoch in epochs:
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        if epoch == 0 and phase != "resume":
            accelerator.save_state(ckpt)
            if phase == "first" and accelerator.process_index == 1:
                os.kill(os.getpid(), signal.SIGKILL)
            if phase == "first":
                accelerator.wait_for_everyone()
    return accelerator.unwrap_model(model).state_dict(), scheduler.get_last_lr()


def test_save_state_kill_load_state_resumes_to_the_same_weights(tmp_path):
    from notebook_launcher import WorkerError

    full = on_ranks(resumable_training, str(tmp_path / "full"), "full")[0]
    with pytest.raises(WorkerError, match="rank 1 was killed by signal SIGKILL"):
        on_ranks(resumable_training, str(tmp_path / "ckpt"), "first")
    resumed = on_ranks(resumable_training, str(tmp_path / "ckpt"), "resume")[0]
    _assert_same_weights(full[0], resumed[0], atol=0)
    assert full[1] == resumed[1]


def crash_during_second_save(ckpt):
    """Save once; then die halfway through writing a second checkpoint."""
    from trainer_core import checkpoint

    accelerator = Accelerator()
    model = accelerator.prepare(nn.Linear(2, 2))
    with torch.no_grad():
        model.weight.fill_(1.0)
    accelerator.save_state(ckpt)
    with torch.no_grad():
        model.weight.fill_(2.0)
    real_save = torch.save

    def dying_save(obj, file):
        real_save(obj, file)
        os._exit(9)  # the process dies after writing one file of the new checkpoint

    checkpoint.torch.save = dying_save
    accelerator.save_state(ckpt)


def load_weights(ckpt):
    accelerator = Accelerator()
    model = accelerator.prepare(nn.Linear(2, 2))
    accelerator.load_state(ckpt)
    return model.weight.detach().clone()


def test_crash_mid_save_leaves_the_previous_checkpoint_intact(tmp_path):
    from notebook_launcher import WorkerError

    ckpt = str(tmp_path / "ckpt")
    with pytest.raises(WorkerError, match="exited with code 9"):
        on_ranks(crash_during_second_save, ckpt, num_processes=1)
    weights = on_ranks(load_weights, ckpt, num_processes=1)[0]
    assert torch.equal(weights, torch.ones(2, 2))


# ---------------------------------------------------------------------------------- the rest of the API


def api_tour():
    accelerator = Accelerator()
    second = Accelerator()  # a second Accelerator in the same process is fine
    rank = accelerator.process_index
    out = {
        "second_sees_world": second.num_processes,
        "sum": accelerator.reduce(torch.tensor([rank + 1.0])).item(),
        "mean": accelerator.reduce(torch.tensor([rank + 1.0]), "mean").item(),
        "uneven_gather": accelerator.gather(torch.arange(rank + 1)).tolist(),
        "padded": accelerator.pad_across_processes(torch.ones(rank + 1), pad_index=-1).tolist(),
    }
    with accelerator.split_between_processes(["a", "b", "c"]) as part:
        out["split"] = part
    with accelerator.split_between_processes(["a", "b", "c"], apply_padding=True) as part:
        out["split_padded"] = part
    import datasets

    table = datasets.Dataset.from_dict({"text": ["a", "b", "c"], "label": [0, 1, 2]})
    with accelerator.split_between_processes(table, apply_padding=True) as rows:
        out["split_dataset"] = (len(rows), rows["text"], rows["label"])
    out["by_keyword"] = (
        accelerator.gather(tensor=torch.tensor([rank])).tolist(),
        accelerator.reduce(tensor=torch.tensor([1.0])).item(),
    )
    order = []
    with accelerator.main_process_first():
        order.append(("inside", rank))
    accelerator.print(f"printed by {rank}")
    out["main_only"] = accelerator.on_main_process(lambda: "ran")()
    for step in range(3):
        accelerator.log({"loss": 1.0 / (step + 1), "rank": rank})
    return out


def test_api_tour_on_two_ranks():
    from notebook_launcher import launch

    job = launch(api_tour, num_processes=2, display="none")
    r0, r1 = job.wait(timeout=120), job.results[1]
    assert r0["second_sees_world"] == 2
    assert (r0["sum"], r0["mean"]) == (3.0, 1.5)
    assert r0["uneven_gather"] == r1["uneven_gather"] == [0, 0, 1]
    assert r0["padded"] == [1.0, -1.0] and r1["padded"] == [1.0, 1.0]
    assert (r0["split"], r1["split"]) == (["a", "b"], ["c"])
    assert r1["split_padded"] == ["c", "c"]
    assert (r0["split_dataset"], r1["split_dataset"]) == ((2, ["a", "b"], [0, 1]), (2, ["c", "c"], [2, 2]))
    assert r0["by_keyword"] == r1["by_keyword"] == ([0, 1], 2.0)
    assert (r0["main_only"], r1["main_only"]) == ("ran", None)
    assert job.logs(0) == "printed by 0\n" and job.logs(1) == ""
    metrics = [(m["rank"], m["step"], m["values"]["loss"]) for m in job.metrics if "loss" in m["values"]]
    assert sorted(metrics) == [(r, s, 1.0 / (s + 1)) for r in (0, 1) for s in range(3)]


def scheduler_and_accumulation():
    accelerator = Accelerator(gradient_accumulation_steps=2)
    model = nn.Linear(6, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    loader = DataLoader(_data(n=40), batch_size=8)  # 5 batches: syncs at 2, 4 and the last (5)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    syncs = []
    for x, y in loader:
        with accelerator.accumulate(model):
            accelerator.backward(F.cross_entropy(model(x), y))
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            syncs.append(accelerator.sync_gradients)
    return syncs, scheduler.get_last_lr()[0]


def test_scheduler_steps_only_when_the_optimizer_steps():
    syncs, lr = on_ranks(scheduler_and_accumulation, num_processes=1)[0]
    assert syncs == [False, True, False, True, True]
    assert lr == 1.0 * 0.5**3


def test_fp16_scaler_and_clipping_on_cpu():
    """Seeded, with small inputs, so the first scaled step does not overflow (a step that does is
    rightly skipped by the scaler)."""
    set_seed(0)
    accelerator = Accelerator(mixed_precision="fp16")
    model = accelerator.prepare(nn.Linear(4, 2))
    optimizer = accelerator.prepare(torch.optim.SGD(model.parameters(), lr=0.1))
    before = model.weight.detach().clone()
    output = model(0.1 * torch.randn(8, 4))
    assert output.dtype == torch.float32  # outputs come back in fp32 for the loss
    accelerator.backward(output.pow(2).mean())
    assert model.weight.grad.abs().max() > 100  # gradients are scaled while in flight
    norm = accelerator.clip_grad_norm_(model.parameters(), max_norm=1e-3)
    assert 0 < float(norm) < 100  # the norm is measured on unscaled gradients
    optimizer.step()
    assert not optimizer.step_was_skipped and not torch.equal(before, model.weight)
    assert (model.weight - before).norm() <= 0.1 * 1e-3 + 1e-6


def test_an_fp16_step_whose_gradients_overflow_is_skipped_and_the_schedule_waits():
    """The scaler skips the step (weights untouched, scale halved), the step reads as skipped, the
    prepared scheduler does not step, and the optimizer's own ``step`` (wrapped by torch's
    scheduler) is the same object afterwards."""
    accelerator = Accelerator(mixed_precision="fp16")
    model = accelerator.prepare(nn.Linear(4, 2))
    optimizer = accelerator.prepare(torch.optim.SGD(model.parameters(), lr=0.1))
    scheduler = accelerator.prepare(torch.optim.lr_scheduler.StepLR(optimizer.optimizer, step_size=1, gamma=0.5))
    wrapped_step = optimizer.optimizer.step
    before, scale = model.weight.detach().clone(), accelerator.scaler.get_scale()
    accelerator.backward(model(torch.ones(2, 4)).sum() * 1e30)
    optimizer.step()
    scheduler.step()
    assert optimizer.step_was_skipped and accelerator.optimizer_step_was_skipped
    assert torch.equal(before, model.weight) and accelerator.scaler.get_scale() == scale / 2
    assert scheduler.get_last_lr() == [0.1] and optimizer.optimizer.step is wrapped_step
    optimizer.zero_grad()
    accelerator.backward(model(torch.ones(2, 4)).mean())
    optimizer.step()
    scheduler.step()
    assert not optimizer.step_was_skipped and not torch.equal(before, model.weight)
    assert scheduler.get_last_lr() == [0.05]


def test_the_fp16_scale_is_checkpointed_by_its_precision(tmp_path):
    """``scaler.pt`` holds the fp16 precision's state; bf16 writes none."""
    from accelerate.utils import GradScalerKwargs

    accelerator = Accelerator(mixed_precision="fp16", kwargs_handlers=[GradScalerKwargs(init_scale=1024.0)])
    model = accelerator.prepare(nn.Linear(2, 2))
    accelerator.backward(model(torch.ones(1, 2)).sum())
    assert accelerator.scaler.get_scale() == 1024.0
    accelerator.save_state(str(tmp_path / "fp16"))
    accelerator.scaler.update(8.0)
    assert accelerator.scaler.get_scale() == 8.0
    accelerator.load_state(str(tmp_path / "fp16"))
    assert accelerator.scaler.get_scale() == 1024.0
    Accelerator(mixed_precision="bf16").save_state(str(tmp_path / "bf16"))
    assert (tmp_path / "fp16" / "scaler.pt").exists() and not (tmp_path / "bf16" / "scaler.pt").exists()


def test_strategies_are_chosen_once_from_the_state():
    from trainer_core.strategies import DDPStrategy, ParallelStrategy, SingleProcessStrategy

    assert type(Accelerator(cpu=True).strategy) is SingleProcessStrategy
    assert on_ranks(lambda: Accelerator().strategy.name, num_processes=2) == ["ddp", "ddp"]
    assert issubclass(DDPStrategy, ParallelStrategy) and not issubclass(DDPStrategy, SingleProcessStrategy)


def test_free_memory_drops_prepared_references():
    import weakref

    accelerator = Accelerator()
    model = accelerator.prepare(nn.Linear(2, 2))
    ref = weakref.ref(model)
    assert accelerator.free_memory(model) == [None]
    del model
    assert ref() is None and accelerator.step == 0


def test_launcher_mixed_precision_becomes_the_accelerator_default():
    results = on_ranks(lambda: Accelerator().mixed_precision, num_processes=2, mixed_precision="bf16")
    assert results == ["bf16", "bf16"]


def test_bad_accelerator_arguments_are_clear():
    with pytest.raises(ValueError, match="mixed_precision='fp32' is not valid; use one of 'no', 'fp16', 'bf16'"):
        Accelerator(mixed_precision="fp32")
    with pytest.raises(ValueError, match="gradient_accumulation_steps must be an int >= 1, got 0"):
        Accelerator(gradient_accumulation_steps=0)
    with pytest.raises(TypeError, match="log\\(\\) takes a dict"):
        Accelerator().log([1, 2])


# ---------------------------------------------------------------------------------- GPU (run where one is lent)


def nccl_gather_and_fp16():
    accelerator = Accelerator(mixed_precision="fp16")
    model = accelerator.prepare(nn.Linear(4, 2))
    optimizer = accelerator.prepare(torch.optim.SGD(model.parameters(), lr=0.1))
    x = torch.randn(8, 4, device=accelerator.device)
    loss = model(x).pow(2).mean()
    accelerator.backward(loss)
    optimizer.step()
    gathered = accelerator.gather(torch.tensor([accelerator.process_index], device=accelerator.device))
    return (
        accelerator.device.type,
        accelerator.state.backend.dist_backend,
        gathered.tolist(),
        accelerator.scaler is not None,
        torch.cuda.is_available(),
    )


@pytest.mark.gpu
def test_cuda_ranks_use_nccl_and_the_fp16_scaler():
    count = min(2, torch.cuda.device_count())
    results = on_ranks(nccl_gather_and_fp16, num_processes=count, device="cuda", start_method="fork")
    for result in results:
        assert result == ("cuda", "nccl", list(range(count)), True, True)


def stateful_resume(directory):
    from trainer_core import DataLoaderConfiguration

    accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True))
    loader = accelerator.prepare(DataLoader(TensorDataset(torch.arange(40)), batch_size=2, shuffle=True))
    rest = []
    for step, (batch,) in enumerate(loader):
        if step == 2:
            accelerator.save_state(directory)
        if step > 2:
            rest.append(batch.tolist())
    accelerator.load_state(directory)
    resumed = [batch.tolist() for (batch,) in loader]
    return rest, resumed, loader.state_dict()


def test_a_stateful_loader_resumes_mid_epoch_from_save_state(tmp_path):
    """With ``use_stateful_dataloader=True`` a checkpoint keeps where each loader was in its epoch."""
    for rest, resumed, state in on_ranks(stateful_resume, str(tmp_path / "checkpoint")):
        assert resumed == rest and len(rest) == 7  # 10 batches per rank, 3 handed out before the save
        assert (state["epoch"], state["yielded"]) == (1, 0)  # the resumed pass finished the epoch
        assert len(state["shuffle"]) > 0  # the next epoch's shuffle state (trainer_core/compat/shuffle.py)


def checkpoints_both_ways(folder):
    import accelerate

    def setup(accelerator):
        torch.manual_seed(0)
        model = nn.Linear(4, 3)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        return accelerator.prepare(model, optimizer, scheduler)

    def train(accelerator, model, optimizer, scheduler):
        loss = model(torch.ones(2, 4)).sum()
        accelerator.backward(loss)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()

    def snapshot(accelerator, model, optimizer, scheduler):
        weights = {k: v.clone() for k, v in accelerator.unwrap_model(model).state_dict().items()}
        moments = [s["exp_avg"].clone() for s in optimizer.state_dict()["state"].values()]
        return weights, moments, scheduler.get_last_lr()

    def same(a, b):
        return (
            all(torch.equal(a[0][k], b[0][k]) for k in a[0])
            and all(torch.equal(x, y) for x, y in zip(a[1], b[1], strict=True))
            and a[2] == b[2]
        )

    ours = Accelerator(cpu=True)
    parts = setup(ours)
    train(ours, *parts)
    ours.save_state(os.path.join(folder, "ours"))
    theirs = accelerate.Accelerator(cpu=True)
    other = setup(theirs)
    theirs.load_state(os.path.join(folder, "ours"))
    read_by_accelerate = same(snapshot(ours, *parts), snapshot(theirs, *other))
    train(theirs, *other)
    theirs.save_state(os.path.join(folder, "theirs"))
    ours.load_state(os.path.join(folder, "theirs"))
    read_by_us = same(snapshot(theirs, *other), snapshot(ours, *parts))
    return read_by_accelerate, read_by_us, sorted(os.listdir(os.path.join(folder, "ours")))


def test_checkpoints_move_between_trainer_core_and_hugging_face_accelerate(tmp_path):
    """Accelerate's load_state reads our save_state and ours reads its, weights, optimizer and scheduler."""
    read_by_accelerate, read_by_us, files = on_ranks(checkpoints_both_ways, str(tmp_path), num_processes=1)[0]
    assert read_by_accelerate and read_by_us
    assert {"model.safetensors", "optimizer.bin", "scheduler.bin", "random_states_0.pkl"} <= set(files)


def accelerate_style_options():
    import datetime

    from accelerate.utils import DistributedDataParallelKwargs, InitProcessGroupKwargs

    accelerator = Accelerator(
        cpu=True,
        kwargs_handlers=[
            DistributedDataParallelKwargs(find_unused_parameters=True),
            InitProcessGroupKwargs(timeout=datetime.timedelta(seconds=60)),
        ],
    )

    class TwoHeads(nn.Module):
        def __init__(self):
            super().__init__()
            self.used, self.unused = nn.Linear(2, 1), nn.Linear(2, 1)

        def forward(self, x):
            return self.used(x)

    model = accelerator.prepare(TwoHeads())
    accelerator.backward(model(torch.ones(1, 2)).sum())  # DDP needs find_unused_parameters here
    rank = torch.tensor([float(accelerator.process_index + 1)])
    with accelerator.local_main_process_first():
        order = accelerator.process_index
    return (
        model.find_unused_parameters,
        accelerator.reduce(rank, "max").item(),
        accelerator.reduce(rank, "min").item(),
        accelerator.reduce(rank, "sum", scale=0.5).item(),
        sorted(accelerator.get_state_dict(model, unwrap=False))[0],
        accelerator.optimizer_step_was_skipped,
        order,
    )


def test_accelerate_style_options_and_members():
    for rank, result in enumerate(on_ranks(accelerate_style_options)):
        assert result == (True, 2.0, 1.0, 1.5, "module.unused.bias", False, rank)


def tracked(folder):
    accelerator = Accelerator(cpu=True, log_with=["json", "csv"], project_dir=folder)
    accelerator.init_trackers("run", config={"lr": 0.1})
    for step in range(3):
        accelerator.log({"loss": 1.0 / (step + 1)}, step=step)
    calls = []
    model = accelerator.prepare(nn.Linear(2, 2))
    handle = accelerator.register_save_state_pre_hook(lambda models, weights, out: calls.append(("save", len(weights))))
    accelerator.register_load_state_pre_hook(lambda models, into: calls.append(("load", type(models[0]).__name__)))
    accelerator.save_state(os.path.join(folder, "ckpt"))
    handle.remove()
    accelerator.save_state(os.path.join(folder, "ckpt2"))
    accelerator.load_state(os.path.join(folder, "ckpt"))
    accelerator.end_training()
    del model
    return [t.name for t in accelerator.trackers], accelerator.get_tracker("json").name, calls


def test_trackers_write_what_the_notebook_view_shows_and_checkpoint_hooks_run(tmp_path):
    import csv
    import json

    from notebook_launcher import launch

    job = launch(tracked, (str(tmp_path),), num_processes=2, display="none")
    job.wait(timeout=240)
    (names0, json0, calls0), (names1, json1, _calls1) = job.results
    assert names0 == ["json", "csv"] and names1 == []  # the main process writes, as in Accelerate
    assert json0 == "json" and json1 == "json"  # the other ranks get a tracker that ignores calls
    assert calls0 == [("save", 1), ("load", "Linear")]  # one model's weights; the removed hook ran once
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [line["values"]["loss"] for line in lines] == [1.0, 0.5, 1.0 / 3]
    rows = list(csv.DictReader((tmp_path / "run" / "metrics.csv").read_text().splitlines()))
    assert [row["step"] for row in rows] == ["0", "1", "2"]
    assert json.loads((tmp_path / "run" / "config.json").read_text()) == {"lr": 0.1}
    shown = [m["values"]["loss"] for m in job.metrics if m["rank"] == 0]
    assert shown == [line["values"]["loss"] for line in lines]  # the same log calls reached the launch's view


def test_load_state_accepts_tied_aliases_and_names_a_missing_weight(tmp_path):
    """A tied weight is saved once (safetensors refuses shared storage): its other names load through
    it; a weight missing from the file for good is an error naming it."""
    from safetensors.torch import load_file, save_file

    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(5, 3)
            self.out = nn.Linear(3, 5, bias=False)
            self.out.weight = self.embed.weight

    accelerator = Accelerator(cpu=True)
    saved = accelerator.prepare(Tied())
    accelerator.save_state(str(tmp_path / "ok"))
    again = Accelerator(cpu=True)
    fresh = again.prepare(Tied())
    again.load_state(str(tmp_path / "ok"))
    assert torch.equal(fresh.out.weight, saved.embed.weight) and fresh.out.weight is fresh.embed.weight
    weights = load_file(str(tmp_path / "ok" / "model.safetensors"))
    save_file({}, str(tmp_path / "ok" / "model.safetensors"))  # the tied weight is gone under every name
    with pytest.raises(RuntimeError, match=r"model.safetensors does not match the model: missing \[.*embed.weight"):
        again.load_state(str(tmp_path / "ok"))
    assert weights  # the file did hold the weight once
