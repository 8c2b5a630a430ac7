"""Sharded checkpoints move between trainer_core and Hugging Face Accelerate, both ways, on 2 gloo ranks.

Accelerate ignores its FSDP and DeepSpeed plugins on a CPU (plain DDP, no warning), so its runs here
set its distributed type by hand after building the Accelerator (``_accelerate_forced``): Accelerate's
own FSDP2 and DeepSpeed code then shards the model and writes and reads the checkpoint, as it does on
GPUs. Each library runs in a launch of its own, as a user porting a run would, and every run starts
from a different seed, so a load that read nothing is seen.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn as nn
from ranks import on_ranks
from torch.utils.data import DataLoader, TensorDataset

from trainer_core.strategies.deepspeed.plugin import import_deepspeed


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Linear(4, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        return self.head(torch.tanh(self.inner(x)))


def _plugins(sharding, library):
    """The ``Accelerator`` keyword for ``sharding`` (("fsdp", state_dict_type) or ("zero", stage))."""
    module = __import__("accelerate.utils" if library == "accelerate" else "trainer_core", fromlist=["_"])
    kind, setting = sharding
    if kind == "fsdp":
        options = {"fsdp_version": 2} if library == "accelerate" else {}
        return {"fsdp_plugin": module.FullyShardedDataParallelPlugin(state_dict_type=setting, **options)}
    plugin = module.DeepSpeedPlugin(zero_stage=setting, gradient_accumulation_steps=1, gradient_clipping=0.0)
    return {"deepspeed_plugin": plugin}


def _accelerate_forced(sharding):
    import accelerate
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType

    plugins = _plugins(sharding, "accelerate")
    if "deepspeed_plugin" in plugins:
        # as trainer_core does: else DeepSpeed's backend compiles its shared-memory all-reduce, an
        # inference-only op, before the first step (40 s of a 2-core machine)
        import_deepspeed()
    accelerator = accelerate.Accelerator(cpu=True, **plugins)
    forced = DistributedType.FSDP if "fsdp_plugin" in plugins else DistributedType.DEEPSPEED
    # both singletons: AcceleratorState() copies PartialState's type each time it is built
    PartialState().distributed_type = accelerator.state.distributed_type = forced
    if forced == DistributedType.FSDP:
        accelerator.state.fsdp_plugin = plugins["fsdp_plugin"]
    else:  # what AcceleratorState does for DeepSpeed off a CPU
        plugins["deepspeed_plugin"].set_mixed_precision("no")
        plugins["deepspeed_plugin"].select(_from_accelerator_state=True)
        accelerator.state.deepspeed_plugins = plugins["deepspeed_plugin"]
    return accelerator


def _full_weights(model):
    """Every parameter and buffer, whole, on every rank (FSDP2's DTensors and ZeRO-3's partitions gathered)."""
    if hasattr(model, "save_checkpoint"):  # a DeepSpeed engine
        import deepspeed

        module = model.module
        with deepspeed.zero.GatheredParameters(list(module.parameters()), modifier_rank=None):
            return {name: tensor.detach().clone() for name, tensor in module.state_dict().items()}
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))


def load_step_save_step(library, sharding, load_from, save_to, seed, batches):
    """Build Net, Adam and a scheduler with ``library``'s Accelerator from ``seed``, load ``load_from``
    (if given), take a step on ``batches[0]``, save to ``save_to``, take a step on ``batches[1]``.
    Rank 0 returns the weights before loading, the weights (and learning rate) after loading and after
    each step, the checkpoint's file names and the prepared model's class."""
    if library == "accelerate":
        accelerator = _accelerate_forced(sharding)
    else:
        from trainer_core import Accelerator

        accelerator = Accelerator(cpu=True, **_plugins(sharding, library))
    torch.manual_seed(seed)
    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    loader = DataLoader(TensorDataset(torch.zeros(8, 4)), batch_size=4)  # DeepSpeed's micro-batch size
    model, optimizer, scheduler, _ = accelerator.prepare(model, optimizer, scheduler, loader)
    initial = _full_weights(model)
    if load_from is not None:
        accelerator.load_state(load_from)
    snapshots = [(_full_weights(model), scheduler.get_last_lr())]
    for index, batch in enumerate(batches):
        x = torch.randn(4, 4, generator=torch.Generator().manual_seed(batch * 10 + accelerator.process_index))
        accelerator.backward(model(x).pow(2).mean())
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        if index == 0:
            accelerator.save_state(save_to)
        snapshots.append((_full_weights(model), scheduler.get_last_lr()))
    return {
        "initial": initial,
        "snapshots": snapshots,
        "files": sorted(os.listdir(save_to)),
        "class": type(model).__name__,
    }


def _assert_same(a, b, atol=0.0):
    (weights_a, lr_a), (weights_b, lr_b) = a, b
    assert weights_a.keys() == weights_b.keys() and lr_a == lr_b
    for name, tensor in weights_a.items():
        torch.testing.assert_close(tensor, weights_b[name], atol=atol, rtol=0, msg=name)


SHARDINGS = {
    "fsdp2-sharded": (("fsdp", "SHARDED_STATE_DICT"), "FSDPNet", {"pytorch_model_fsdp_0", "optimizer_0"}),
    "fsdp2-full": (("fsdp", "FULL_STATE_DICT"), "FSDPNet", {"pytorch_model_fsdp.bin", "optimizer.bin"}),
    "zero2": (("zero", 2), "DeepSpeedEngine", {"pytorch_model", "latest"}),
    "zero3": (("zero", 3), "DeepSpeedEngine", {"pytorch_model", "latest"}),
}


@pytest.mark.parametrize("name", SHARDINGS)
def test_sharded_checkpoints_move_between_trainer_core_and_accelerate_both_ways(tmp_path, name):
    """trainer_core's save_state is read by Accelerate's load_state and Accelerate's by trainer_core's:
    the loaded weights are the saved ones and the next step from them gives the weights the saving run
    reached with the same step (so Adam's moments, its step count and the schedule came across); both
    write the same files (ours adds the atomic-save marker and the loaders' epochs)."""
    sharding, wrapped, files = SHARDINGS[name]
    if sharding[0] == "zero":
        pytest.importorskip("deepspeed", reason="the deepspeed extra is not installed")
    ours = on_ranks(load_step_save_step, "trainer_core", sharding, None, str(tmp_path / "ours"), 1, (0, 1))[0]
    theirs_args = ("accelerate", sharding, str(tmp_path / "ours"), str(tmp_path / "theirs"), 2, (1, 2))
    theirs = on_ranks(load_step_save_step, *theirs_args)[0]
    back = on_ranks(
        load_step_save_step, "trainer_core", sharding, str(tmp_path / "theirs"), str(tmp_path / "back"), 3, (2,)
    )[0]
    assert ours["class"] == theirs["class"] == wrapped  # both libraries really sharded the model
    _assert_same(theirs["snapshots"][0], ours["snapshots"][1])  # Accelerate read ours
    _assert_same(theirs["snapshots"][1], ours["snapshots"][2], atol=1e-6)  # ... with the optimizer's state
    _assert_same(back["snapshots"][0], theirs["snapshots"][1])  # we read Accelerate's
    _assert_same(back["snapshots"][1], theirs["snapshots"][2], atol=1e-6)
    for run in (theirs, back):  # what they loaded is not what their own seed made
        assert not torch.equal(run["initial"]["head.weight"], run["snapshots"][0][0]["head.weight"])
    assert files <= set(theirs["files"])  # Accelerate's layout, file for file, plus our two
    assert set(ours["files"]) - set(theirs["files"]) == {"COMPLETE", "notebook_launcher_state.json"}
    assert set(theirs["files"]) <= set(ours["files"])


def test_whole_state_files_under_the_names_earlier_releases_gave_them_still_load(tmp_path):
    """trainer_core 0.2 wrote FULL_STATE_DICT checkpoints as ``pytorch_model_fsdp_0.bin`` and
    ``optimizer_0.bin`` (Accelerate reads ``pytorch_model_fsdp.bin``, ``optimizer.bin``): load_state
    still reads them."""
    sharding = ("fsdp", "FULL_STATE_DICT")
    ours = on_ranks(load_step_save_step, "trainer_core", sharding, None, str(tmp_path / "old"), 1, (0, 1))[0]
    for stem in ("pytorch_model_fsdp", "optimizer"):
        os.rename(tmp_path / "old" / f"{stem}.bin", tmp_path / "old" / f"{stem}_0.bin")
    back = on_ranks(
        load_step_save_step, "trainer_core", sharding, str(tmp_path / "old"), str(tmp_path / "back"), 2, (1,)
    )[0]
    _assert_same(back["snapshots"][0], ours["snapshots"][1])
    _assert_same(back["snapshots"][1], ours["snapshots"][2], atol=1e-6)
