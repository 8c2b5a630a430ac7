"""DeepSpeed ZeRO 1/2/3 through the Accelerator on real gloo ranks: one process's weights, 1/N of the
memory, a killed run resumed from the engine's checkpoint, Accelerate's plugin, clear errors."""

from __future__ import annotations

import json
import os
import sys

import pytest
import torch
import torch.nn.functional as F
from ranks import on_ranks, seeded_order
from test_fsdp import Net, _assert_same_weights, _data, resumed_after_a_kill, two_epochs
from torch.utils.data import DataLoader

from trainer_core import Accelerator, DeepSpeedPlugin, set_seed
from trainer_core.strategies.deepspeed.plugin import import_deepspeed, resolve_config

pytest.importorskip("deepspeed", reason="the deepspeed extra is not installed")


def train(plugin_options, batch_size, accumulation=1, precision="no", scheduled=False, empty_group=False):
    """Two epochs of Net with Adam (and a StepLR schedule if ``scheduled``; a second, empty param
    group if ``empty_group``, as a no-decay group that matched no name, and the same schedule as a
    LambdaLR, which keeps per-group lists); ``plugin_options`` None: no
    DeepSpeed. Rank 0 (every rank below ZeRO-3) returns the full weights, with the norms
    ``clip_grad_norm_`` reported."""
    set_seed(7)
    options = dict(plugin_options) if plugin_options is not None else None
    if options is not None and options.pop("from_accelerate", False):
        from accelerate.utils import DeepSpeedPlugin as AcceleratePlugin

        plugin = AcceleratePlugin(**options)
    else:
        plugin = DeepSpeedPlugin(**options) if options is not None else None
    accelerator = Accelerator(
        deepspeed_plugin=plugin, gradient_accumulation_steps=accumulation, mixed_precision=precision
    )
    model = Net()
    groups = [{"params": list(model.parameters())}] + ([{"params": [], "weight_decay": 0.0}] if empty_group else [])
    optimizer = torch.optim.Adam(groups, lr=0.01)
    step_size = 3 if scheduled else 10**6
    if empty_group:  # a schedule with one entry per group (as Transformers' linear one): halved every step_size
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.5 ** (step // step_size))
    else:
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=step_size, gamma=0.5)
    loader = DataLoader(_data(), batch_size=batch_size, shuffle=True, generator=seeded_order())
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    norms = two_epochs(accelerator, model, optimizer, loader, scheduler)
    return {
        "weights": accelerator.get_state_dict(model),
        "norms": norms,
        "strategy": accelerator.strategy.name,
        "accumulation": accelerator.gradient_accumulation_steps,
        "lr": scheduler.get_last_lr()[0],
    }


NO_CLIPPING = {"gradient_clipping": 0.0}  # DeepSpeed (like Accelerate) clips at 1.0 unless told otherwise


def test_zero_stages_1_2_3_reach_the_weights_of_one_process():
    """Global batch 16, fp32, Adam built before prepare: ZeRO-1, -2 and -3 end where one process does,
    to 1e-5, with the same gradient norms; ZeRO-3 gathers the whole weights to rank 0 only. ZeRO-3
    runs under spawn, the others under fork."""
    single = on_ranks(train, None, 16, num_processes=1)[0]
    assert not torch.equal(single["weights"]["head.weight"], Net().state_dict()["head.weight"])
    for stage, method in ((1, "fork"), (2, "fork"), (3, "spawn")):
        ranks = on_ranks(train, {"zero_stage": stage, **NO_CLIPPING}, 8, start_method=method)
        assert ranks[0]["strategy"] == "deepspeed"
        _assert_same_weights(single["weights"], ranks[0]["weights"], atol=1e-5)
        torch.testing.assert_close(torch.tensor(ranks[0]["norms"]), torch.tensor(single["norms"]), atol=1e-5, rtol=0)
        assert (ranks[1]["weights"] == {}) == (stage == 3)


def test_nothing_is_compiled_and_a_lock_left_by_an_ended_build_blocks_nothing(tmp_path, monkeypatch):
    """On a CPU machine DeepSpeed's backend compiles a shared-memory all-reduce (used only for
    tensor-parallel inference) before the first step, under a lock file in the extensions folder; a
    rank ended mid-build leaves the file, and every later launch waited on it for ever. A launch
    compiles nothing, so such a file is no obstacle."""
    extensions = tmp_path / "extensions"
    lock = extensions / "deepspeed_shm_comm" / "lock"  # what a build ended by SIGKILL leaves
    lock.parent.mkdir(parents=True)
    lock.touch()
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(extensions))
    ranks = on_ranks(train, {"zero_stage": 2, **NO_CLIPPING}, 8, timeout=90)
    assert ranks[0]["strategy"] == "deepspeed"
    assert sorted(path.name for path in extensions.rglob("*")) == ["deepspeed_shm_comm", "lock"]


def test_offloading_to_the_cpu_reaches_the_same_weights():
    """offload_optimizer_device="cpu" (ZeRO-2, the user's torch Adam stepping the offloaded state) and
    offload of parameters too (ZeRO-3) train to one process's weights."""
    single = on_ranks(train, None, 16, num_processes=1)[0]
    for options in (
        {"zero_stage": 2, "offload_optimizer_device": "cpu"},
        {"zero_stage": 3, "offload_optimizer_device": "cpu", "offload_param_device": "cpu"},
    ):
        _assert_same_weights(single["weights"], on_ranks(train, {**options, **NO_CLIPPING}, 8)[0]["weights"], atol=1e-5)


def test_a_scheduler_prepared_with_zero_steps_as_under_ddp():
    """A torch StepLR prepared with the engine's optimizer follows the engine's steps as it follows
    DDP's (per Accelerate: once per process per optimizer step), to the same weights and rate."""
    ddp = on_ranks(train, None, 8, 1, "no", True)[0]
    zero = on_ranks(train, {"zero_stage": 2, **NO_CLIPPING}, 8, 1, "no", True)[0]
    assert ddp["strategy"] == "ddp"
    assert zero["lr"] == ddp["lr"] == 0.01 * 0.5**5  # 8 steps x 2 processes, halved every 3
    _assert_same_weights(ddp["weights"], zero["weights"], atol=1e-5)


def test_a_scheduler_over_an_empty_param_group_steps_once_deepspeed_drops_the_group():
    """deepspeed.initialize removes the optimizer's empty groups; the schedule built before keeps its
    per-group rates in step (torch's step failed on the mismatch: found with Accelerate's
    deepspeed_with_config_support example, whose no-decay group matches no Llama parameter)."""
    ddp = on_ranks(train, None, 8, 1, "no", True, True)[0]
    zero = on_ranks(train, {"zero_stage": 2, **NO_CLIPPING}, 8, 1, "no", True, True)[0]
    assert zero["lr"] == ddp["lr"] == 0.01 * 0.5**5
    _assert_same_weights(ddp["weights"], zero["weights"], atol=1e-5)


def test_the_removed_groups_entries_go_from_schedules_inside_a_sequence_too():
    """A SequentialLR's own schedules lose the removed group's entries; its milestones are no
    per-group list and stay."""
    from trainer_core.strategies.deepspeed.strategy import _drop_removed_groups

    used = torch.zeros(1, requires_grad=True)
    optimizer = torch.optim.SGD([{"params": []}, {"params": [used]}], lr=1.0)
    warm = torch.optim.lr_scheduler.LambdaLR(optimizer, [lambda s: 0.0, lambda s: 0.5])
    decay = torch.optim.lr_scheduler.LambdaLR(optimizer, [lambda s: 0.0, lambda s: 0.25])
    schedule = torch.optim.lr_scheduler.SequentialLR(optimizer, [warm, decay], milestones=[2])
    before = list(optimizer.param_groups)
    optimizer.param_groups[:] = optimizer.param_groups[1:]  # what deepspeed.initialize does
    _drop_removed_groups(schedule, before)
    rates = []
    for _ in range(3):
        optimizer.step()
        schedule.step()
        rates.append(schedule.get_last_lr())
    assert rates == [[0.5], [0.25], [0.25]] and schedule._milestones == [2]


def test_zero2_accumulation_from_the_plugin_equals_the_larger_batch():
    """gradient_accumulation_steps=2 given to the plugin (not the Accelerator) is what the Accelerator
    uses: 2 ranks x batch 8 x 2 micro-batches = one process x batch 32."""
    single = on_ranks(train, None, 32, num_processes=1)[0]
    ranks = on_ranks(train, {"zero_stage": 2, "gradient_accumulation_steps": 2, **NO_CLIPPING}, 8)
    assert ranks[0]["accumulation"] == 2
    _assert_same_weights(single["weights"], ranks[0]["weights"], atol=1e-5)


def test_zero3_bf16_stays_near_fp32_and_gives_16_bit_weights():
    """bf16 (DeepSpeed keeps bf16 weights and an fp32 master copy; the forward autocasts fp32 inputs):
    within 0.05 of one fp32 process after 16 Adam steps, and the gathered weights are bf16, as
    Accelerate's 16-bit consolidation gives them."""
    single = on_ranks(train, None, 16, num_processes=1)[0]
    bf16 = on_ranks(train, {"zero_stage": 3, **NO_CLIPPING}, 8, 1, "bf16")[0]
    assert {value.dtype for value in bf16["weights"].values()} == {torch.bfloat16}
    differences = [float((bf16["weights"][k].float() - single["weights"][k]).abs().max()) for k in single["weights"]]
    assert 0 < max(differences) <= 0.05


def held_after_a_step(sharding):
    """``Accelerator.held_memory()`` after one step (``sharding``: the Accelerator's plugin argument)."""
    accelerator = Accelerator(**sharding)
    model = Net(width=256, depth=4)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    loader = DataLoader(_data(), batch_size=4)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    accelerator.backward(model(torch.randn(4, 6)).sum())
    optimizer.step()
    return accelerator.held_memory()


def test_zero3_holds_about_one_nth_of_the_parameters_and_optimizer_state():
    """Measured from the tensors each rank holds after a step (``Accelerator.held_memory``): ZeRO-3's
    parameters + Adam state + fp32 master on 2 ranks within 1.2x of half of DDP's parameters + Adam
    state; ZeRO-1 keeps whole parameters and shards the rest."""
    ddp = on_ranks(held_after_a_step, {})
    zero3 = on_ranks(held_after_a_step, {"deepspeed_plugin": DeepSpeedPlugin(zero_stage=3)})
    zero1 = on_ranks(held_after_a_step, {"deepspeed_plugin": DeepSpeedPlugin(zero_stage=1)})
    whole = ddp[0]["parameters"] + ddp[0]["optimizer"]
    for held in zero3:
        assert held["parameters"] + held["optimizer"] <= 1.2 * whole / 2, (ddp, zero3)
        assert held["parameters"] >= ddp[0]["parameters"] / 2
    for held in zero1:
        assert held["parameters"] == pytest.approx(ddp[0]["parameters"], rel=0.01)
        assert held["optimizer"] <= 1.2 * (ddp[0]["optimizer"] / 2 + ddp[0]["parameters"] / 2)  # Adam + fp32 master


def test_the_notebook_view_shows_each_ranks_held_memory_after_the_first_step():
    """A sharded run (ZeRO-3, FSDP2) shows, per rank, the MB of parameters + optimizer state it holds
    (measured after the first optimizer step): a metric of the launch, drawn in the finished cell's HTML."""
    from notebook_launcher import launch
    from notebook_launcher.frontend.views.static import static_bundle
    from trainer_core import FullyShardedDataParallelPlugin
    from trainer_core.accelerator import MEMORY_METRIC

    for sharding in (
        {"deepspeed_plugin": DeepSpeedPlugin(zero_stage=3)},
        {"fsdp_plugin": FullyShardedDataParallelPlugin()},
    ):
        job = launch(held_after_a_step, (sharding,), num_processes=2, display="none")
        job.wait(timeout=240)
        shown = {m["rank"]: m["values"][MEMORY_METRIC] for m in job.metrics if MEMORY_METRIC in m["values"]}
        assert sorted(shown) == [0, 1]
        for rank, held in enumerate(job.results):
            assert shown[rank] == pytest.approx((held["parameters"] + held["optimizer"]) / 2**20)
        assert MEMORY_METRIC in static_bundle(job)["text/html"]
    ddp = launch(held_after_a_step, ({},), num_processes=2, display="none")
    ddp.wait(timeout=240)
    assert not [m for m in ddp.metrics if MEMORY_METRIC in m["values"]]  # only a sharded model's memory is news


@pytest.mark.parametrize("stage", [2, 3])
def test_a_killed_zero_run_restarts_from_its_checkpoint_to_the_same_weights(tmp_path, stage):
    """save_state writes the engine's checkpoint in Accelerate's layout (``pytorch_model/`` with every
    rank's optimizer partitions) inside our atomically published folder; a rank killed after the
    first checkpoint, max_restarts=1, ends with the weights of a run never interrupted."""
    folder = resumed_after_a_kill(tmp_path, {"deepspeed_plugin": DeepSpeedPlugin(zero_stage=stage)})
    files = os.listdir(os.path.join(folder, "pytorch_model"))
    assert len([name for name in files if "optim_states" in name]) == 2, files


def test_accelerates_plugin_and_a_json_config_with_auto_values(tmp_path):
    """Accelerate's DeepSpeedPlugin instance, and a DeepSpeed JSON config whose batch sizes,
    accumulation and clipping are "auto", run unchanged and reach one process's weights."""
    single = on_ranks(train, None, 16, num_processes=1)[0]
    accelerate = on_ranks(train, {"from_accelerate": True, "zero_stage": 2, **NO_CLIPPING}, 8)[0]
    assert accelerate["strategy"] == "deepspeed"
    _assert_same_weights(single["weights"], accelerate["weights"], atol=1e-5)
    config = {
        "train_batch_size": "auto",
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "gradient_clipping": 0.0,
        "zero_optimization": {"stage": 1},
    }
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(config))
    from_file = on_ranks(train, {"hf_ds_config": str(path)}, 8)[0]
    _assert_same_weights(single["weights"], from_file["weights"], atol=1e-5)


def train_evaluate_save(folder):
    """ZeRO-3: train one epoch, then prepare a second model for evaluation only (no optimizer) and
    keep training the first; save_model writes the first model's whole weights."""
    set_seed(5)
    accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=3))
    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    loader = DataLoader(_data(), batch_size=8)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for step, (x, y) in enumerate(loader):
        if step == 2:
            judge, loader_again = accelerator.prepare(Net(), DataLoader(_data(), batch_size=8))
        accelerator.backward(F.cross_entropy(model(x), y))
        optimizer.step()
        optimizer.zero_grad()
    with torch.no_grad():
        judged = judge(next(iter(loader_again))[0])
    names = accelerator.save_model(model, folder)
    return {"weights": accelerator.get_state_dict(model), "names": names, "judged": tuple(judged.shape)}


def test_zero3_evaluation_model_and_save_model(tmp_path):
    """A model prepared without an optimizer runs forward (its partitions gathered) and does not take
    over backward from the trained one; save_model writes the gathered weights as safetensors."""
    from safetensors.torch import load_file

    ranks = on_ranks(train_evaluate_save, str(tmp_path))
    assert ranks[0]["judged"] == ranks[1]["judged"] == (8, 3)
    assert ranks[0]["names"] == ["model.safetensors"]
    _assert_same_weights(load_file(tmp_path / "model.safetensors"), ranks[0]["weights"], atol=0)
    assert not torch.equal(ranks[0]["weights"]["head.weight"], Net().state_dict()["head.weight"])


def test_config_values_that_cannot_be_filled_are_refused_by_name():
    plugin = DeepSpeedPlugin(zero_stage=2)
    common = {"num_processes": 2, "gradient_accumulation_steps": 1, "mixed_precision": "no"}
    with pytest.raises(ValueError, match="pass a DataLoader to the same prepare"):
        resolve_config(plugin, batch_sizes=[], **common)
    with pytest.raises(ValueError, match="has batch_size=None"):
        resolve_config(plugin, batch_sizes=[None], **common)
    with_optimizer = DeepSpeedPlugin(hf_ds_config={"zero_optimization": {"stage": 1}, "optimizer": {"type": "Adam"}})
    with pytest.raises(ValueError, match="names an optimizer and prepare"):
        resolve_config(with_optimizer, batch_sizes=[8], **common)
    buckets = DeepSpeedPlugin(hf_ds_config={"zero_optimization": {"stage": 3, "reduce_bucket_size": "auto"}})
    with pytest.raises(ValueError, match=r"reduce_bucket_size are 'auto', which needs the model's config\.hidden_size"):
        resolve_config(buckets, batch_sizes=[8], model=Net(), **common)
    bf16_config = DeepSpeedPlugin(hf_ds_config={"zero_optimization": {"stage": 1}, "bf16": {"enabled": True}})
    with pytest.raises(ValueError, match="mixed_precision='fp16' but the DeepSpeed config enables bf16"):
        resolve_config(bf16_config, batch_sizes=[8], **{**common, "mixed_precision": "fp16"})
    assert (
        resolve_config(plugin, batch_sizes=[16, 8], split_batches=True, **common)["train_micro_batch_size_per_gpu"] == 4
    )
    evaluation = resolve_config(plugin, batch_sizes=[8], client_optimizer=False, **common)  # prepare(model, loader)
    assert "zero_allow_untested_optimizer" not in evaluation and "optimizer" not in evaluation


def test_plugin_options_it_does_not_support_are_refused_by_name():
    with pytest.raises(ValueError, match="zero_stage=4 is not a ZeRO stage"):
        DeepSpeedPlugin(zero_stage=4)
    with pytest.raises(ValueError, match="offload_param_device='nvme' is not supported"):
        DeepSpeedPlugin(zero_stage=3, offload_param_device="nvme")
    with pytest.raises(ValueError, match="has no 'zero_optimization' section"):
        DeepSpeedPlugin(hf_ds_config={"train_batch_size": 8})
    with pytest.raises(ValueError, match="pass fsdp_plugin or deepspeed_plugin, not both"):
        from trainer_core import FullyShardedDataParallelPlugin

        Accelerator(deepspeed_plugin=DeepSpeedPlugin(), fsdp_plugin=FullyShardedDataParallelPlugin())
    with pytest.warns(UserWarning, match="deepspeed_plugin has no effect in one process"):
        assert Accelerator(deepspeed_plugin=DeepSpeedPlugin()).strategy.name == "single"


def test_a_missing_deepspeed_says_how_to_install_it(monkeypatch):
    """Without DeepSpeed importable (its module hidden), the error names the extra to install."""
    monkeypatch.setitem(sys.modules, "deepspeed", None)
    with pytest.raises(ImportError, match=r"pip install 'notebook-launcher\[deepspeed\]'"):
        import_deepspeed()
