"""The names code written for Accelerate reads on ``accelerator.state`` and the ``Accelerator``, the
kwargs handlers it passes (DDP communication hooks, autocast, profiling) and what is refused.

Checked against the installed Accelerate: every public name of its ``AcceleratorState`` (with the
``PartialState`` names it forwards) and of its ``Accelerator`` exists on ours; the behaviours run on
2 real ranks over gloo where they involve collectives.
"""

from __future__ import annotations

import json

import pytest
import torch
from ranks import on_ranks
from torch import nn

from trainer_core import Accelerator
from trainer_core.compat.accelerator_state import AcceleratorState


def public(obj) -> set[str]:
    return {name for name in dir(obj) if not name.startswith("_")} | {
        name for name in vars(obj) if not name.startswith("_")
    }


def accelerate_names():
    """Accelerate's own names, from an Accelerate Accelerator in a fresh process (its state is a singleton)."""
    import accelerate
    from accelerate.state import AcceleratorState as Theirs

    theirs = accelerate.Accelerator(cpu=True)
    names = public(theirs.state) | public(accelerate.PartialState()), public(theirs)
    Theirs._reset_state(True)
    return names


def test_every_name_of_accelerates_state_and_accelerator_exists_here():
    state_names, accelerator_names = accelerate_names()
    ours = Accelerator(cpu=True)
    assert {name for name in state_names if name not in public(ours.state) and not hasattr(ours.state, name)} == set()
    assert accelerator_names - public(ours) == set()
    assert len(state_names) >= 29 and len(accelerator_names) >= 100  # what the issue counted


def test_the_state_answers_with_the_accelerators_set_up():
    accelerator = Accelerator(cpu=True, mixed_precision="bf16")
    state = accelerator.state
    assert isinstance(state, AcceleratorState)
    assert (state.mixed_precision, state.deepspeed_plugin, state.deepspeed_plugins, state.fsdp_plugin) == (
        "bf16",
        None,
        None,
        None,
    )
    assert (state.is_fsdp2, state.initialized, state.debug, state.default_device) == (False, True, False, state.device)
    assert state.dynamo_plugin.backend == "NO" and state.parallelism_config is None and state.device_mesh is None
    assert accelerator.native_amp and not accelerator.multi_device and accelerator.log_with == []
    with state.split_between_processes([1, 2, 3]) as mine:
        assert mine == [1, 2, 3]
    assert state.on_main_process(lambda: "main")() == "main"
    with pytest.raises(ValueError, match="one DeepSpeed plugin per Accelerator"):
        state.select_deepspeed_plugin("student")
    with pytest.raises(ValueError, match="no DeepSpeed plugin called 'default'"):
        state.get_deepspeed_plugin("default")
    del accelerator  # the state keeps answering without its Accelerator (no reference back)
    assert state.mixed_precision == "bf16"


def test_transformers_style_checks_read_the_deepspeed_plugin():
    pytest.importorskip("deepspeed")
    from trainer_core import DeepSpeedPlugin

    plugin = DeepSpeedPlugin(zero_stage=2)
    accelerator = Accelerator(cpu=True, deepspeed_plugins={"default": plugin})
    assert accelerator.state.deepspeed_plugin is accelerator.deepspeed_plugin is not None
    assert accelerator.state.deepspeed_plugins == {"default": accelerator.deepspeed_plugin}
    with pytest.raises(ValueError, match="holds 2 plugins"):
        Accelerator(cpu=True, deepspeed_plugins={"a": plugin, "b": plugin})


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"megatron_lm_plugin": object()}, "Megatron-LM training is not supported"),
        ({"torch_tp_plugin": object()}, "ParallelismConfig"),
    ],
)
def test_what_has_no_engine_here_is_refused_with_the_reason(options, message):
    with pytest.raises(ValueError, match=message):
        Accelerator(cpu=True, **options)


def test_fp8_handlers_are_refused_and_a_handler_kind_is_taken_once():
    from accelerate.utils import AutocastKwargs

    # Accelerate's FP8 recipe classes refuse to be made without their engines (not installable
    # without a GPU), so a stand-in of the same name: handlers are matched by class name
    recipe = type("TERecipeKwargs", (), {})()
    with pytest.raises(ValueError, match="does not train in FP8"):
        Accelerator(cpu=True, kwargs_handlers=[recipe])
    with pytest.raises(ValueError, match="two AutocastKwargs"):
        Accelerator(cpu=True, kwargs_handlers=[AutocastKwargs(), AutocastKwargs()])


def test_an_autocast_handler_sets_every_autocast():
    from accelerate.utils import AutocastKwargs

    handler = AutocastKwargs(enabled=False)
    accelerator = Accelerator(cpu=True, mixed_precision="bf16", kwargs_handlers=[handler])
    assert accelerator.autocast_handler is handler
    model = accelerator.prepare(Probe())
    with accelerator.autocast():
        assert not torch.is_autocast_enabled("cpu")
    model(torch.ones(1, 4))
    assert model.seen == [False]  # the prepared forward follows the handler too
    plain = Accelerator(cpu=True, mixed_precision="bf16").prepare(Probe())
    plain(torch.ones(1, 4))
    assert plain.seen == [True]


class Probe(nn.Module):
    """Records whether its forward ran under autocast."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.seen = []

    def forward(self, x):
        self.seen.append(torch.is_autocast_enabled("cpu"))
        return self.linear(x)


def comm_hook_run(hook):
    from accelerate.utils import DistributedDataParallelKwargs

    torch.manual_seed(0)
    handlers = [] if hook is None else [DistributedDataParallelKwargs(comm_hook=hook)]
    accelerator = Accelerator(cpu=True, kwargs_handlers=handlers)
    model = accelerator.prepare(nn.Linear(64, 64))
    torch.manual_seed(1 + accelerator.process_index)
    model(torch.randn(8, 64)).square().sum().backward()
    registered = model._get_ddp_logging_data().get("comm_hook")
    return registered, model.module.weight.grad.flatten()[:256].tolist()


def test_a_ddp_communication_hook_is_registered_and_changes_the_all_reduce():
    (plain, grads), _ = on_ranks(comm_hook_run, None)
    (fp16, fp16_grads), (fp16_other, fp16_grads_other) = on_ranks(comm_hook_run, "fp16")
    (power, _), _ = on_ranks(comm_hook_run, "power_sgd")
    assert plain in (None, "") and fp16 == fp16_other and "fp16_compress_hook" in fp16
    assert "powerSGD_hook" in power
    assert fp16_grads == fp16_grads_other  # still an all-reduce: every rank holds the same gradients
    differences = [abs(a - b) for a, b in zip(grads, fp16_grads, strict=True)]
    assert 0 < max(differences) < 1e-2  # the gradients travelled in fp16


def profiled(folder):
    from accelerate.utils import ProfileKwargs

    accelerator = Accelerator(cpu=True, kwargs_handlers=[ProfileKwargs(record_shapes=True, output_trace_dir=folder)])
    model = accelerator.prepare(nn.Linear(8, 8))
    with accelerator.profile() as profiler:
        model(torch.ones(2, 8)).sum().backward()
    keys = {event.key for event in profiler.key_averages()}
    return "aten::addmm" in keys or "aten::linear" in keys


def test_profile_records_each_rank_and_writes_its_trace(tmp_path):
    assert on_ranks(profiled, str(tmp_path)) == [True, True]
    for rank in (0, 1):
        trace = json.loads((tmp_path / f"profile_{rank}.json").read_text())
        assert any("addmm" in event.get("name", "") for event in trace["traceEvents"])
