"""Accelerate's compile options on trainer_core's Accelerator, checked against Accelerate itself:
``dynamo_backend``, ``TorchDynamoPlugin`` (backend, mode, fullgraph, dynamic, regional compilation,
``ACCELERATE_DYNAMO_*``), ``unwrap_model(keep_torch_compile=...)`` and the checkpoint's names.
Before, every backend but "no" was refused ("call torch.compile yourself").

The "eager" backend is used where only the wrapping matters (it traces without generating code);
the rank tests compile for real.
"""

from __future__ import annotations

import accelerate
import pytest
import torch
from accelerate.utils import TorchDynamoPlugin as AccelerateDynamoPlugin
from ranks import on_ranks
from safetensors.torch import load_file

import trainer_core
from trainer_core import Accelerator, TorchDynamoPlugin

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")


class Blocks(torch.nn.Module):
    """A stack of repeated blocks between two other layers, as a transformer is."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Linear(4, 8)
        self.layers = torch.nn.ModuleList(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()) for _ in range(3))
        self.head = torch.nn.Linear(8, 2)

    def forward(self, x):
        x = self.embed(x)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def compiled_paths(model):
    """Where the compile wrappers are, by module path."""
    return sorted(name for name, module in model.named_modules() if type(module).__name__ == "OptimizedModule")


def both(**options):
    """The same model prepared by Accelerate's Accelerator and by ours, with the same options."""
    torch.manual_seed(0)
    model = Blocks()
    theirs = accelerate.Accelerator(cpu=True, **options).prepare(model)
    accelerate.state.AcceleratorState._reset_state(reset_partial_state=True)
    ours_accelerator = Accelerator(cpu=True, **options)
    return theirs, ours_accelerator.prepare(Blocks()), ours_accelerator


def test_dynamo_backend_compiles_the_model_as_accelerate_does():
    theirs, ours, accelerator = both(dynamo_backend="eager")
    assert type(ours) is type(theirs) and type(ours).__name__ == "OptimizedModule"
    assert compiled_paths(ours) == compiled_paths(theirs) == [""]
    assert accelerator.state.dynamo_plugin.backend == "EAGER"
    assert torch.equal(
        ours(torch.ones(2, 4)), accelerator.unwrap_model(ours, keep_torch_compile=False)(torch.ones(2, 4))
    )


def test_regional_compilation_compiles_each_repeated_block_as_accelerate_does():
    plugin = {"backend": "eager", "use_regional_compilation": True}
    theirs, ours, _ = both(dynamo_plugin=AccelerateDynamoPlugin(**plugin))
    assert compiled_paths(ours) == compiled_paths(theirs)
    assert "layers.0" in compiled_paths(ours) and "layers.2" in compiled_paths(ours)
    accelerate.state.AcceleratorState._reset_state(reset_partial_state=True)
    again = Accelerator(cpu=True, dynamo_plugin=TorchDynamoPlugin(**plugin)).prepare(Blocks())
    assert compiled_paths(again) == compiled_paths(theirs)  # our own plugin object: the same


@pytest.mark.parametrize("regional", [False, True])
def test_unwrap_model_and_the_checkpoint_see_the_users_module(tmp_path, regional):
    plugin = TorchDynamoPlugin(backend="eager", use_regional_compilation=regional)
    accelerator = Accelerator(cpu=True, dynamo_plugin=plugin)
    model = accelerator.prepare(Blocks())
    plain = accelerator.unwrap_model(model, keep_torch_compile=False)
    assert type(plain) is Blocks
    kept = accelerator.unwrap_model(model)  # keep_torch_compile=True: the wrapper, pointed at the module
    assert kept is model and (kept._orig_mod if not regional else kept.__dict__["_orig_mod"]) is plain
    names = set(Blocks().state_dict())
    assert set(accelerator.get_state_dict(model)) == names
    accelerator.save_state(str(tmp_path))
    assert set(load_file(tmp_path / "model.safetensors")) == names  # no "_orig_mod." in a checkpoint
    with torch.no_grad():
        plain.head.weight.fill_(0.0)
    accelerator.load_state(str(tmp_path))
    assert plain.head.weight.abs().sum() > 0


def test_the_plugins_fields_and_accelerates_variables_reach_torch_compile(monkeypatch):
    seen = {}

    def spy(model, **kwargs):
        seen.update(kwargs)
        return model

    monkeypatch.setattr(torch, "compile", spy)
    monkeypatch.setenv("ACCELERATE_DYNAMO_BACKEND", "EAGER")
    monkeypatch.setenv("ACCELERATE_DYNAMO_MODE", "reduce-overhead")
    monkeypatch.setenv("ACCELERATE_DYNAMO_USE_FULLGRAPH", "true")
    monkeypatch.setenv("ACCELERATE_DYNAMO_USE_DYNAMIC", "false")
    Accelerator(cpu=True).prepare(Blocks())
    assert seen == {"backend": "eager", "mode": "reduce-overhead", "fullgraph": True, "dynamic": False}
    assert AccelerateDynamoPlugin().to_kwargs() == seen  # what Accelerate gives torch.compile from the same variables


def test_bad_compile_options_are_refused_by_name():
    with pytest.raises(ValueError, match=r"dynamo backend 'nope' is not one of .*inductor"):
        Accelerator(cpu=True, dynamo_backend="nope")
    with pytest.raises(ValueError, match="pass dynamo_backend or dynamo_plugin, not both"):
        Accelerator(cpu=True, dynamo_backend="eager", dynamo_plugin=TorchDynamoPlugin())
    assert Accelerator(cpu=True, dynamo_backend="no").state.dynamo_plugin.backend == "NO"
    assert "TorchDynamoPlugin" in trainer_core.__all__


def compiled_training(backend):
    import torch.distributed as dist

    from trainer_core import Accelerator, set_seed

    set_seed(0)
    accelerator = Accelerator(dynamo_backend=backend)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    torch.manual_seed(dist.get_rank())  # each rank its own batch: DDP averages the gradients
    for _ in range(3):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    weights = accelerator.unwrap_model(model, keep_torch_compile=False)[0].weight.detach()
    return type(model).__name__, weights.clone()


def test_a_compiled_ddp_model_trains_in_step_on_every_rank():
    (name0, weights0), (name1, weights1) = on_ranks(compiled_training, "inductor")
    assert name0 == name1 == "OptimizedModule"
    assert torch.equal(weights0, weights1)  # gradients were averaged through the compiled model
