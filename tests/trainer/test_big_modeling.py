"""Big-model inference: a ~400 MB model saved in 100 MB shards, loaded in a fresh process into a CPU
budget of 150 MB with the rest on disk, giving the in-memory model's outputs; the same files read by
Hugging Face Accelerate; and the errors a user meets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from textwrap import dedent

import pytest
import torch
from big_model_source import MODEL

from trainer_core.big_modeling import (
    cpu_offload,
    disk_offload,
    dispatch_model,
    infer_auto_device_map,
    init_empty_weights,
    load_checkpoint_and_dispatch,
    remove_hook_from_module,
    save_sharded,
)

LOAD = dedent("""
    import ast, json, sys, torch
    sys.path.insert(0, sys.argv[1])
    from bigmodel import Model
    checkpoint, offload, out, library = sys.argv[2:6]
    max_memory = ast.literal_eval(sys.argv[7])
    if library == "trainer_core":
        from trainer_core.big_modeling import init_empty_weights, load_checkpoint_and_dispatch
    else:
        from accelerate import init_empty_weights, load_checkpoint_and_dispatch
    def peak():   # VmHWM: this process's high-water RSS (ru_maxrss would start at the parent's)
        status = open("/proc/self/status").read()
        return int(status.split("VmHWM:")[1].split()[0]) * 1024
    before = peak()
    with init_empty_weights():
        model = Model()
    built = peak()
    model = load_checkpoint_and_dispatch(model, checkpoint, device_map="auto", max_memory=max_memory,
                                         no_split_module_classes=["Block"], offload_folder=offload)
    with torch.no_grad():
        y = model(torch.load(sys.argv[6]))
    torch.save(y.cpu(), out)
    print(json.dumps({"empty_build": built - before, "peak_above_start": peak() - before,
                      "device_map": {k: str(v) for k, v in model.hf_device_map.items()},
                      "output_device": str(y.device)}))
""")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The model, its outputs on a fixed input, and its checkpoint in 100 MB shards."""
    folder = tmp_path_factory.mktemp("big")
    (folder / "bigmodel.py").write_text(MODEL)
    sys.path.insert(0, str(folder))
    from bigmodel import Model

    torch.manual_seed(0)
    model = Model().eval()
    x = torch.randn(4, 1024)
    with torch.no_grad():
        expected = model(x)
    torch.save(x, folder / "x.pt")
    files = save_sharded(model.state_dict(), folder / "checkpoint", max_shard_size="100MB")
    del model
    return folder, Model, x, expected, files


def _load_in_fresh_process(folder, library, max_memory=None):
    """Load the checkpoint with ``device_map="auto"`` in a new process (its own memory and CUDA):
    (its report, the model's output on the CPU)."""
    out, offload = folder / f"y_{library}.pt", folder / f"offload_{library}"
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            LOAD,
            str(folder),
            str(folder / "checkpoint"),
            str(offload),
            str(out),
            library,
            str(folder / "x.pt"),
            repr(max_memory or {"cpu": "150MB"}),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1]), torch.load(out)


def test_sharded_files_follow_the_hugging_face_layout(saved):
    folder, *_, files = saved
    assert files[-1] == "model.safetensors.index.json" and len(files) == 6  # 5 shards of <= 100 MB
    assert files[0] == "model-00001-of-00005.safetensors"
    index = json.loads((folder / "checkpoint" / "model.safetensors.index.json").read_text())
    assert index["metadata"]["total_size"] == sum(4 * p.numel() for p in saved[1]().parameters())
    assert index["weight_map"]["blocks.0.up.weight"] == "model-00001-of-00005.safetensors"
    for name in files[:-1]:
        assert os.path.getsize(folder / "checkpoint" / name) <= 100_000_000 + 1_000_000  # + the header


def test_a_fresh_process_runs_the_model_in_150_mb_of_cpu_with_the_rest_on_disk(saved):
    folder, _, _, expected, _ = saved
    report, y = _load_in_fresh_process(folder, "trainer_core")
    # the same weights, the same operations on the same CPU: equal to float32 rounding (atol 1e-5)
    assert torch.allclose(y, expected, atol=1e-5, rtol=0)
    assert report["empty_build"] < 20 * 2**20  # init_empty_weights holds nothing of the 403 MB
    # what stays on the CPU (<= 150 MB, one block kept free) + one block mapped in at a time
    assert report["peak_above_start"] < 250 * 2**20, report
    placed = report["device_map"]
    assert placed["blocks.0"] == "cpu" and placed["blocks.11"] == "disk" and set(placed.values()) == {"cpu", "disk"}
    assert (folder / "offload_trainer_core" / "index.json").exists()


def test_hugging_face_accelerate_loads_the_same_files_to_the_same_outputs(saved):
    folder, _, _, expected, _ = saved
    _, y = _load_in_fresh_process(folder, "accelerate")
    assert torch.allclose(y, expected, atol=1e-5, rtol=0)


def test_the_automatic_map_fills_the_cpu_then_the_disk_keeping_blocks_whole(saved):
    _, Model, *_ = saved
    with init_empty_weights():
        model = Model()
    device_map = infer_auto_device_map(model, max_memory={"cpu": "150MB"}, no_split_module_classes=["Block"])
    # 150 MB less one block (33.6 MB) kept free for the offloaded block that runs: 3 blocks fit
    assert [device_map[f"blocks.{i}"] for i in range(4)] == ["cpu", "cpu", "cpu", "disk"]
    assert device_map["head"] == "disk"
    whole = infer_auto_device_map(model, max_memory={"cpu": "1GB"})
    assert whole == {"": "cpu"}
    halves = infer_auto_device_map(model, max_memory={"cpu": "150MB"}, dtype=torch.float16)
    assert sum(device == "cpu" for device in halves.values()) > sum(device == "cpu" for device in device_map.values())


def test_dispatch_cpu_and_disk_offload_give_the_same_outputs(tmp_path):
    torch.manual_seed(1)
    make = lambda: torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    reference = make()
    x = torch.randn(5, 16)
    expected = reference(x)
    state = reference.state_dict()
    for offload in (
        lambda m: cpu_offload(m),
        lambda m: disk_offload(m, tmp_path / "disk"),
        lambda m: dispatch_model(m, {"0": "cpu", "1": "cpu", "2": "disk"}, offload_dir=tmp_path / "mixed"),
    ):
        model = make()
        model.load_state_dict(state)
        model = offload(model)
        assert torch.equal(model(x), expected)
    assert model[2].weight.is_meta  # on disk: in memory only while it runs
    remove_hook_from_module(model, recurse=True)
    assert not any(hasattr(m, "_big_modeling_hook") for m in model.modules())


def test_clear_errors(saved, tmp_path):
    folder, Model, *_ = saved
    with init_empty_weights():
        model = Model()
    checkpoint = folder / "checkpoint"
    with pytest.raises(ValueError, match=r"device 'cuda:0', which is not here: the devices are \['cpu', 'disk'\]"):
        load_checkpoint_and_dispatch(model, checkpoint, device_map={"": "cuda:0"})
    with pytest.raises(ValueError, match=r"does not fit in max_memory: 10 part\(s\) .* pass offload_folder="):
        load_checkpoint_and_dispatch(model, checkpoint, max_memory={"cpu": "150MB"}, no_split_module_classes=["Block"])
    with pytest.raises(ValueError, match="device_map='fastest' is not valid"):
        load_checkpoint_and_dispatch(model, checkpoint, device_map="fastest")
    with pytest.raises(ValueError, match=r"dtype=torch\.int8 is not a floating dtype"):
        load_checkpoint_and_dispatch(model, checkpoint, dtype=torch.int8)
    with pytest.raises(ValueError, match="cannot run matrix products on the CPU"):
        load_checkpoint_and_dispatch(model, checkpoint, dtype=torch.float8_e4m3fn)
    other = torch.nn.Sequential(torch.nn.Linear(2, 2))
    save_sharded({"0.weight": torch.zeros(2, 2), "extra": torch.zeros(1)}, tmp_path / "small")
    with pytest.raises(ValueError, match=r"1 missing: 0\.bias; 1 unexpected: extra"):
        load_checkpoint_and_dispatch(other, tmp_path / "small", device_map=None)
    with pytest.raises(FileNotFoundError, match="no checkpoint in"):
        load_checkpoint_and_dispatch(other, tmp_path, device_map=None)


def test_tied_weights_are_saved_once_and_stay_tied(tmp_path):
    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(10, 4)
            self.out = torch.nn.Linear(4, 10, bias=False)
            self.out.weight = self.embed.weight

        def forward(self, ids):
            return self.out(self.embed(ids))

    reference = Tied()
    save_sharded(reference.state_dict(), tmp_path)
    with init_empty_weights():
        model = Tied()
    model = load_checkpoint_and_dispatch(model, tmp_path, device_map=None)
    assert model.out.weight is model.embed.weight
    ids = torch.tensor([1, 2, 3])
    assert torch.equal(model(ids), reference(ids))


@pytest.mark.gpu
def test_the_automatic_map_fills_the_gpu_then_the_cpu_then_the_disk(saved):
    """Real GPU placement, in a fresh process (this one forks ranks, so its CUDA stays untouched)."""
    folder, _, _, expected, _ = saved
    report, y = _load_in_fresh_process(folder, "trainer_core", max_memory={0: "120MB", "cpu": "120MB"})
    placed = report["device_map"]
    assert placed["blocks.0"] == "0" and placed["blocks.11"] == "disk" and set(placed.values()) == {"0", "cpu", "disk"}
    assert report["output_device"] == "cuda:0"
    assert torch.allclose(y, expected, atol=1e-3)
