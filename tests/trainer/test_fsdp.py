"""Sharded training (FSDP2) through the Accelerator on real gloo ranks: the weights of one process,
1/N of the memory per rank, whole weights back out, clear errors."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from ranks import on_ranks, seeded_order
from torch.utils.data import DataLoader, TensorDataset

from trainer_core import Accelerator, FullyShardedDataParallelPlugin, set_seed


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x):
        return x + torch.tanh(self.linear(x))


class Net(nn.Module):
    _no_split_modules = ("Block",)  # read by transformer-based wrapping, as Transformers models have it

    def __init__(self, width=16, depth=3):
        super().__init__()
        self.embed = nn.Linear(6, width)
        self.blocks = nn.Sequential(*[Block(width) for _ in range(depth)])
        self.head = nn.Linear(width, 3)

    def forward(self, x):
        return self.head(self.blocks(self.embed(x)))


def _data(n=64):
    generator = torch.Generator().manual_seed(1234)
    return TensorDataset(torch.randn(n, 6, generator=generator), torch.randint(0, 3, (n,), generator=generator))


def train(sharded, batch_size, accumulation=1, optimizer_first=True, plugin_options=None):
    """Train Net with Adam (built before prepare, unless told otherwise); rank 0 returns the full weights."""
    set_seed(7)
    options = dict(plugin_options or {})
    if options.pop("from_accelerate", False):  # Hugging Face Accelerate's own plugin, as its users write it
        from accelerate.utils import FullyShardedDataParallelPlugin as AcceleratePlugin

        plugin = AcceleratePlugin(fsdp_version=2, **options)
    else:
        plugin = FullyShardedDataParallelPlugin(**options) if sharded else None
    accelerator = Accelerator(fsdp_plugin=plugin, gradient_accumulation_steps=accumulation)
    model = Net()
    loader = DataLoader(_data(), batch_size=batch_size, shuffle=True, generator=seeded_order())
    if optimizer_first:
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    else:
        model = accelerator.prepare(model)
        optimizer = accelerator.prepare(torch.optim.Adam(model.parameters(), lr=0.01))
        loader = accelerator.prepare(loader)
    forwards = []
    accelerator.unwrap_model(model).blocks[0].register_forward_pre_hook(lambda module, args: forwards.append(1))
    norms = two_epochs(accelerator, model, optimizer, loader)
    weights = accelerator.get_state_dict(model)
    return {"weights": weights, "norms": norms, "strategy": accelerator.strategy.name, "block_forwards": len(forwards)}


def two_epochs(accelerator, model, optimizer, loader, scheduler=None):
    """Train with cross-entropy under ``accumulate``, clipping at 10; the norms ``clip_grad_norm_`` gave."""
    norms = []
    for _ in range(2):
        for x, y in loader:
            with accelerator.accumulate(model):
                accelerator.backward(F.cross_entropy(model(x), y))
                if accelerator.sync_gradients:
                    norms.append(float(accelerator.clip_grad_norm_(model.parameters(), 10.0)))
                optimizer.step()
                if scheduler is not None:
                    scheduler.step()
                optimizer.zero_grad()
    return norms


def _assert_same_weights(a, b, atol):
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=atol, rtol=0)


def test_fsdp2_and_ddp_reach_the_weights_of_one_process():
    """Global batch 16 everywhere, fp32, Adam: FSDP2 (every Block a unit, the optimizer built before
    prepare and re-pointed at the sharded parameters) and DDP end where one process does, to 1e-5."""
    single = on_ranks(train, False, 16, num_processes=1)[0]
    ddp = on_ranks(train, False, 8)[0]
    fsdp = on_ranks(train, True, 8, 1, True, {"auto_wrap_policy": "transformer_based_wrap"})
    assert fsdp[0]["strategy"] == "fsdp" and ddp["strategy"] == "ddp"
    assert fsdp[1]["weights"] == {}  # the full weights are gathered to rank 0
    _assert_same_weights(single["weights"], ddp["weights"], atol=1e-5)
    _assert_same_weights(single["weights"], fsdp[0]["weights"], atol=1e-5)
    torch.testing.assert_close(torch.tensor(fsdp[0]["norms"]), torch.tensor(single["norms"]), atol=1e-5, rtol=0)
    assert not torch.equal(single["weights"]["head.weight"], Net().state_dict()["head.weight"])


def test_fsdp2_gradient_accumulation_equals_the_larger_batch():
    """2 ranks x batch 8 x 2 accumulation steps (gradients kept unsharded until the sync step) = one
    process x batch 32; the optimizer made after prepare, size-based wrapping."""
    single = on_ranks(train, False, 32, num_processes=1)[0]
    options = {"auto_wrap_policy": "size_based_wrap", "min_num_params": 200, "reshard_after_forward": False}
    fsdp = on_ranks(train, True, 8, 2, False, options)[0]
    _assert_same_weights(single["weights"], fsdp["weights"], atol=1e-5)


def test_accelerates_plugin_with_activation_checkpointing_and_bf16_parameters():
    """Accelerate's FullyShardedDataParallelPlugin instance works unchanged: with activation
    checkpointing (fp32) the weights are one process's to 1e-5; with a bf16 MixedPrecisionPolicy
    (bf16 parameters in forward and backward, fp32 gradient reduction and optimizer step) they stay
    within 0.05 of them after 16 steps (Adam moves a weight by up to 0.01 a step)."""
    single = on_ranks(train, False, 16, num_processes=1)[0]
    accelerate_options = {
        "from_accelerate": True,
        "auto_wrap_policy": "transformer_based_wrap",
        "transformer_cls_names_to_wrap": ["Block"],
        "activation_checkpointing": True,
    }
    checkpointed = on_ranks(train, True, 8, 1, True, accelerate_options)[0]
    assert checkpointed["strategy"] == "fsdp"
    assert checkpointed["block_forwards"] == 2 * single["block_forwards"]  # recomputed in every backward
    _assert_same_weights(single["weights"], checkpointed["weights"], atol=1e-5)
    bf16 = on_ranks(train, True, 8, 1, True, {"mixed_precision_policy": "bf16"})[0]
    _assert_same_weights(single["weights"], bf16["weights"], atol=0.05)
    assert all(value.dtype == torch.float32 for value in bf16["weights"].values())  # the stored weights stay fp32
    differences = [float((bf16["weights"][k] - single["weights"][k]).abs().max()) for k in single["weights"]]
    assert max(differences) > 0  # bf16 did compute in lower precision


def _bytes(tensor):
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return local.numel() * local.element_size()


def training_memory(sharded):
    """Bytes this rank holds of parameters, gradients and Adam's state after one step (local shards)."""
    plugin = FullyShardedDataParallelPlugin(auto_wrap_policy="transformer_based_wrap") if sharded else None
    accelerator = Accelerator(fsdp_plugin=plugin)
    model = Net(width=256, depth=4)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.backward(model(torch.randn(4, 6)).sum())
    optimizer.step()
    parameters = list(model.parameters())
    held = sum(_bytes(p) for p in parameters) + sum(_bytes(p.grad) for p in parameters)
    for state in optimizer.optimizer.state.values():
        held += sum(_bytes(value) for value in state.values() if torch.is_tensor(value) and value.dim())
    return held


def test_fsdp2_holds_about_one_nth_of_the_memory_per_rank():
    """Measured from the tensors each rank holds after a step: FSDP2 on 2 ranks is within 1.2x of half
    of what DDP holds per rank."""
    ddp = on_ranks(training_memory, False)
    fsdp = on_ranks(training_memory, True)
    assert ddp[0] == ddp[1]
    ideal = ddp[0] / 2
    assert all(held <= 1.2 * ideal for held in fsdp), (ddp, fsdp)
    assert sum(fsdp) >= ddp[0]  # nothing lost: the shards add up to the whole


def rank_0_loads_the_weights(folder):
    """cpu_ram_efficient_loading: rank 1 builds the model on 'meta'; after prepare its shards hold rank 0's
    weights. save_model writes one consolidated safetensors file."""
    set_seed(3)
    accelerator = Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin(cpu_ram_efficient_loading=True))
    if accelerator.is_main_process:
        model = Net()
        original = {key: value.clone() for key, value in model.state_dict().items()}
    else:
        with torch.device("meta"):
            model = Net()
        original = None
    model = accelerator.prepare(model)
    output = model(torch.ones(2, 6))
    names = accelerator.save_model(model, folder)
    return {"original": original, "output": output.detach(), "names": names, "full": accelerator.get_state_dict(model)}


def test_rank_0_loading_and_save_model_give_whole_weights(tmp_path):
    from safetensors.torch import load_file

    results = on_ranks(rank_0_loads_the_weights, str(tmp_path))
    _assert_same_weights(results[0]["original"], results[0]["full"], atol=0)
    torch.testing.assert_close(results[0]["output"], results[1]["output"], atol=0, rtol=0)  # same weights on both
    assert results[0]["names"] == ["model.safetensors"]
    _assert_same_weights(load_file(os.path.join(tmp_path, "model.safetensors")), results[0]["original"], atol=0)
    expected = Net()
    expected.load_state_dict(results[0]["original"])
    torch.testing.assert_close(expected(torch.ones(2, 6)), results[0]["output"], atol=1e-6, rtol=0)


def refuses(case):
    plugin = FullyShardedDataParallelPlugin(transformer_cls_names_to_wrap="Decoder" if case == "names" else None)
    accelerator = Accelerator(fsdp_plugin=plugin)
    model = Net()
    if case == "dtypes":
        model.head.to(torch.float64)
    try:
        accelerator.prepare(model)
    except ValueError as error:
        return str(error)
    return "accepted"


@pytest.mark.parametrize(
    "case, words",
    [
        ("names", "transformer_cls_names_to_wrap names classes the model does not have: Decoder"),
        ("dtypes", "the parameters of one FSDP unit (Net) have different dtypes: torch.float32 (embed.weight)"),
    ],
)
def test_models_fsdp_cannot_shard_are_refused_clearly(case, words):
    assert words in on_ranks(refuses, case)[0]


def test_size_based_wrapping_never_picks_a_bare_list_of_blocks():
    """A ``ModuleList`` holding the blocks passes the size threshold but has no forward for
    ``fully_shard`` to hook (torch refuses it): the blocks become the units (found running
    Accelerate's test_performance.py on a BERT with size-based wrapping)."""
    from trainer_core.strategies.fsdp.strategy import wrapped_units

    class Listed(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([Block(16) for _ in range(3)])

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return x

    plugin = FullyShardedDataParallelPlugin(auto_wrap_policy="size_based_wrap", min_num_params=200)
    names = [type(unit).__name__ for unit in wrapped_units(Listed(), plugin)]
    assert "ModuleList" not in names and names.count("Block") == 3


def test_plugin_options_it_does_not_support_are_refused_by_name():
    with pytest.raises(ValueError, match="fsdp_version=1 is not supported"):
        FullyShardedDataParallelPlugin(fsdp_version=1)
    with pytest.raises(ValueError, match="FSDP option backward_prefetch='BACKWARD_POST' is not supported"):
        FullyShardedDataParallelPlugin(extra={"backward_prefetch": "BACKWARD_POST"})
    with pytest.raises(ValueError, match="state_dict_type must be one of SHARDED_STATE_DICT, FULL_STATE_DICT"):
        FullyShardedDataParallelPlugin(state_dict_type="LOCAL_STATE_DICT")
    with pytest.warns(UserWarning, match="fsdp_plugin has no effect in one process"):
        assert Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin()).strategy.name == "single"


def resumable(project, sharding, die_once):
    """Two epochs of sharded training (``sharding``: the Accelerator's plugin argument), checkpointed
    (``save_state``) after each; with ``die_once``, rank 1 is killed right after the first checkpoint
    of the first attempt. Each attempt starts from the latest checkpoint (``load_state()``). Rank 0
    returns the full weights; every rank the last checkpoint's folder."""
    import signal

    set_seed(3)
    accelerator = Accelerator(**sharding, project_dir=project)
    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    loader = DataLoader(_data(), batch_size=8, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    resumed = accelerator.load_state()
    for epoch in range(0 if resumed is None else 1, 2):
        for x, y in loader:
            accelerator.backward(F.cross_entropy(model(x), y))
            optimizer.step()
            optimizer.zero_grad()
        folder = accelerator.save_state()
        marker = os.path.join(project, "died")
        if die_once and epoch == 0 and accelerator.process_index == 1 and not os.path.exists(marker):
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
    return {"weights": accelerator.get_state_dict(model), "resumed": resumed, "folder": folder}


def resumed_after_a_kill(tmp_path, sharding):
    """The last checkpoint's folder of a run whose rank 1 was killed once (max_restarts=1), after
    checking it ends with the weights of a run never interrupted (Adam state included)."""
    straight = on_ranks(resumable, str(tmp_path / "straight"), sharding, False)[0]
    restarted = on_ranks(resumable, str(tmp_path / "restarted"), sharding, True, max_restarts=1)[0]
    assert os.path.exists(tmp_path / "restarted" / "died")
    assert restarted["resumed"].endswith("checkpoint_0") and straight["resumed"] is None
    _assert_same_weights(straight["weights"], restarted["weights"], atol=0)
    return restarted["folder"]


@pytest.mark.parametrize("kind", ["SHARDED_STATE_DICT", "FULL_STATE_DICT"])
def test_a_killed_sharded_run_restarts_from_its_checkpoint_to_the_same_weights(tmp_path, kind):
    """save_state writes Accelerate's FSDP layout (each rank its shards through torch.distributed.checkpoint,
    or the full state from rank 0); a rank killed after the first checkpoint, max_restarts=1, and the
    second attempt ends with the weights of a run never interrupted (Adam state included)."""
    plugin = FullyShardedDataParallelPlugin(auto_wrap_policy="transformer_based_wrap", state_dict_type=kind)
    files = set(os.listdir(resumed_after_a_kill(tmp_path, {"fsdp_plugin": plugin})))
    if kind == "SHARDED_STATE_DICT":
        assert {"optimizer_0", "pytorch_model_fsdp_0"} <= files
    else:
        assert {"optimizer.bin", "pytorch_model_fsdp.bin"} <= files
    assert "model.safetensors" not in files


def test_fsdp_set_up_by_accelerate_launch_is_taken_and_its_fsdp1_default_refused(monkeypatch):
    """``accelerate launch --use_fsdp`` sets variables that Accelerator() reads when given no plugin
    (tests/compat/test_accelerate_compat.py runs a whole script that way); its FSDP1 default is refused by name."""
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.delenv("FSDP_VERSION", raising=False)
    with pytest.raises(ValueError, match="fsdp_version=1 is not supported"):
        Accelerator(cpu=True)
    monkeypatch.setenv("FSDP_VERSION", "2")
    monkeypatch.setenv("FSDP_STATE_DICT_TYPE", "FULL_STATE_DICT")
    with pytest.warns(UserWarning, match="no effect in one process"):
        accelerator = Accelerator(cpu=True)
    assert accelerator.fsdp_plugin.state_dict_type == "FULL_STATE_DICT"


def test_the_same_sharded_training_runs_under_spawn():
    """Spawned ranks (what a kernel that initialised CUDA gets) train to the forked ranks' weights."""
    options = {"auto_wrap_policy": "transformer_based_wrap"}
    forked = on_ranks(train, True, 8, 1, True, options)[0]
    spawned = on_ranks(train, True, 8, 1, True, options, start_method="spawn")[0]
    _assert_same_weights(forked["weights"], spawned["weights"], atol=0)
