"""trainer_core's Accelerator takes Accelerate's keyword names: code that calls ``gather(tensor=...)``,
``save(obj, f=..., safe_serialization=True)`` or ``load_state(dir, strict=False)`` runs with one
import changed. Checked against the installed Accelerate's own signatures, then by calling each."""

from __future__ import annotations

import inspect

import accelerate
import pytest
import torch
from safetensors.torch import load_file

import trainer_core
from trainer_core import Accelerator

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")  # each test sets its own precision


def _parameters(function):
    return [p for p in inspect.signature(function).parameters.values() if p.name != "self"]


def test_every_shared_method_takes_accelerates_parameter_names_in_its_order():
    """Every public method both have: each of Accelerate's parameters exists under its name, and
    the positional ones come in Accelerate's order."""
    differences = []
    for name in sorted(dir(accelerate.Accelerator)):
        ours = getattr(trainer_core.Accelerator, name, None)
        theirs = inspect.getattr_static(accelerate.Accelerator, name)
        if name.startswith("_") or ours is None or isinstance(theirs, property) or not callable(ours):
            continue
        expected, given = _parameters(getattr(accelerate.Accelerator, name)), _parameters(ours)
        open_keywords = any(p.kind == p.VAR_KEYWORD for p in given)
        names = {p.name for p in given}
        missing = [p.name for p in expected if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in names]
        order = [p.name for p in expected if p.kind == p.POSITIONAL_OR_KEYWORD]
        our_order = [p.name for p in given if p.kind == p.POSITIONAL_OR_KEYWORD]
        if (missing and not open_keywords) or our_order[: len(order)] != order[: len(our_order)]:
            differences.append(f"{name}: Accelerate {order}, missing {missing}, ours {our_order}")
    assert differences == []


def test_the_renamed_keywords_work_when_called_by_name(tmp_path):
    accelerator = Accelerator(cpu=True)
    values = torch.arange(3.0)
    assert torch.equal(accelerator.gather(tensor=values), values)
    assert torch.equal(accelerator.reduce(tensor=values, reduction="sum"), values)
    assert torch.equal(accelerator.gather_for_metrics(input_data=values), values)
    assert torch.equal(accelerator.pad_across_processes(tensor=values, dim=0), values)
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer, device_placement=[True, False])  # the CPU: no move
    accelerator.save(model.state_dict(), f=tmp_path / "weights.safetensors", safe_serialization=True)
    loaded = load_file(tmp_path / "weights.safetensors")
    assert set(loaded) == {"weight", "bias"} and torch.equal(loaded["weight"], model.weight.detach())
    accelerator.save({"step": 3}, f=tmp_path / "plain.pt")
    assert torch.load(tmp_path / "plain.pt") == {"step": 3}
    with pytest.raises(TypeError, match="dict of tensors"):
        accelerator.save({"step": 3}, f=tmp_path / "bad.safetensors", safe_serialization=True)
    with pytest.raises(ValueError, match="one per object"):
        accelerator.prepare(torch.nn.Linear(1, 1), device_placement=[True, True])


def test_load_state_takes_loads_and_model_keywords(tmp_path):
    """``strict=False`` reaches the model's load_state_dict (a model grown by a layer resumes);
    ``load_kwargs`` reach torch.load."""
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(torch.nn.Sequential(torch.nn.Linear(2, 2)))
    accelerator.save_state(tmp_path / "state")
    grown = Accelerator(cpu=True)
    bigger = grown.prepare(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1)))
    with pytest.raises(RuntimeError, match="does not match"):
        grown.load_state(tmp_path / "state")
    grown.load_state(tmp_path / "state", load_kwargs={"weights_only": False}, strict=False)
    assert torch.equal(bigger[0].weight, model[0].weight)


def test_autocast_handler_turns_autocast_off_and_optimizer_choice_unscales_one():
    class AutocastKwargs:  # Accelerate's handler, as trainer_core reads it (by attribute)
        enabled = False
        cache_enabled = None

    accelerator = Accelerator(cpu=True, mixed_precision="bf16")
    layer = torch.nn.Linear(4, 4)
    with accelerator.autocast():
        assert layer(torch.ones(1, 4)).dtype == torch.bfloat16
    with accelerator.autocast(autocast_handler=AutocastKwargs()):
        assert layer(torch.ones(1, 4)).dtype == torch.float32
    with accelerator.autocast(autocast_handler=accelerate.utils.AutocastKwargs(enabled=False)):
        assert layer(torch.ones(1, 4)).dtype == torch.float32
    model = accelerator.prepare(torch.nn.Linear(2, 1))
    optimizer = accelerator.prepare(torch.optim.SGD(model.parameters(), lr=0.1))
    accelerator.unscale_gradients(optimizer=optimizer)  # bf16 has no scaler: nothing to do, no error
    accelerator.unscale_gradients(optimizer=[optimizer])


def test_unwrap_model_can_drop_torch_compile_and_evaluation_models_are_not_wrapped():
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(2, 1)
    compiled = torch.compile(model)  # compiled on first call only: never called here
    assert accelerator.unwrap_model(compiled, keep_torch_compile=False) is model
    assert accelerator.unwrap_model(compiled) is compiled
    evaluated = accelerator.prepare_model(torch.nn.Linear(2, 1), evaluation_mode=True)
    assert type(evaluated) is torch.nn.Linear
    with pytest.raises(NotImplementedError, match="slice_fn_for_dispatch"):
        accelerator.prepare_data_loader(torch.utils.data.DataLoader([1, 2]), slice_fn_for_dispatch=lambda *a: a)
