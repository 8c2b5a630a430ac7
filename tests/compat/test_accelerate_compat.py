"""Hugging Face Accelerate's own multi-process test scripts pass on trainer_core with one import swapped.

Each script of the installed accelerate package runs under torchrun on 2 CPU ranks (with
``ACCELERATE_USE_CPU=1``, as ``accelerate launch --cpu`` sets; without it Accelerate itself runs
the ranks as unrelated single processes), with ``Accelerator`` imported from trainer_core and
nothing else changed (``tests/accelerate_compat.py``). Every test call in each script's ``main``
must pass on both ranks, except the deliberate differences listed here with their reason. Only the
calls that use trainer_core's objects count for it: the others test Accelerate's own
``PartialState`` and operations, which pass or fail whatever trainer_core does (all of test_ops).

``test_distributed_data_loop.py`` runs too, although Accelerate itself hangs in its join test on
CPU (its ``join_uneven_inputs`` works on GPUs only; ours uses torch's ``Join`` on CPUs as well).
``external_deps/test_metrics.py`` imports ``datasets``, ``evaluate`` and ``transformers`` (test
extras); on CPU it runs its torch-metrics tests (the GLUE ones need a GPU and a download).
``external_deps/test_checkpointing.py`` and ``test_performance.py`` download MRPC, its metric and a
Hub BERT: they run offline on stand-ins (``accelerate_offline.py``) and a tiny local BERT, each
script's own assertions untouched; Accelerate itself passes both here the same way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from paths import TESTS

from notebook_launcher.launching.ports import free_port

HARNESS = TESTS / "accelerate_compat.py"

DELIBERATE = {
    # It checks that an Accelerate Accelerator stops working once Accelerate's singleton state is
    # reset behind its back; trainer_core's Accelerator owns its state and keeps working.
    "test_reinstantiated_state()",
    # Every rank saves into a temporary directory of its own and loads from it; trainer_core writes
    # a checkpoint once, atomically, from the main process, so the other ranks' directories hold no
    # complete checkpoint. With one shared directory (the normal case) the same flow passes.
    "test_stateful_dataloader_save_state(accelerator)",
}

# (at least: the test calls each script's main makes on 2 CPU ranks, and the passing ones that use
# trainer_core's objects, as of Accelerate 1.15; with the deliberate differences, which use them
# too, 32 of the 52 calls. Accelerate 1.16 adds one call to test_script and one to
# test_distributed_data_loop, both passing on trainer_core.) Accelerate itself passes all of them in
# test_script, test_sync, test_ops and test_metrics here; in test_distributed_data_loop it passes 2
# and then hangs. The benchmarks page (docs/pages/benchmarks.md) shows them.
EXPECTED = {
    "test_script": (18, 7),
    "test_sync": (4, 4),
    "test_ops": (10, 0),
    "test_distributed_data_loop": (14, 13),
    "test_metrics": (6, 6),
}


def run_script(script, out, cwd, library="trainer_core", script_args=(), launch_env=None):
    """Run ``script`` through the harness on 2 CPU ranks (``launch_env``: what ``accelerate launch``
    would set besides); each rank's recorded test calls, and the run."""
    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1", **(launch_env or {})}
    env["TMPDIR"] = str(cwd)  # torchrun's log folders and the scripts' temporary files go with the test's
    port = str(free_port("127.0.0.1"))
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", port]
    command += [str(HARNESS), script, str(out), "--library", library, "--", *map(str, script_args)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, cwd=cwd)
    calls = []
    for rank in (0, 1):
        recorded = Path(f"{out}.rank{rank}")
        assert recorded.exists(), f"rank {rank} recorded nothing:\n{run.stderr[-3000:]}"
        lines = [json.loads(line) for line in recorded.read_text().splitlines()]
        ended = bool(lines) and lines[-1] == {"ended": script}
        calls.append(lines[:-1] if ended else lines)
        # (a deliberate difference that is the script's last call leaves the ranks out of step, so
        # what main does after it, Accelerate's end_training barrier, may fail)
        finished = ended or (calls[-1] and calls[-1][-1]["call"] in DELIBERATE)
        assert finished, f"rank {rank} did not finish {script}:\n{run.stderr[-3000:]}"
    return calls, run


@pytest.mark.parametrize("script", sorted(EXPECTED))
def test_accelerate_script_passes_with_trainer_core(script, tmp_path):
    out = tmp_path / script
    ranks, run = run_script(script, out, tmp_path)
    for rank, results in enumerate(ranks):
        failed = {r["call"]: r["error"] for r in results if not r["passed"] and r["call"] not in DELIBERATE}
        assert failed == {}, f"rank {rank}: {json.dumps(failed, indent=1)}\n{run.stderr[-3000:]}"
        calls, ours = EXPECTED[script]
        assert len(results) >= calls, f"rank {rank} ran {len(results)} tests:\n{run.stderr[-3000:]}"
        used = sorted(r["call"] for r in results if r["ours"] and r["passed"])
        assert len(used) >= ours, f"rank {rank}: {len(used)} passing calls used trainer_core, not {ours}: {used}"


def _passed_with_ours(ranks, run):
    for rank, results in enumerate(ranks):
        assert [(r["call"], r["passed"], r["ours"]) for r in results] == [
            ("training_function(config, args)", True, True)
        ], f"rank {rank}: {json.dumps(results, indent=1)}\n{run.stderr[-3000:]}"


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    pytest.importorskip("transformers")
    from accelerate_offline import make_tiny_bert

    return make_tiny_bert(str(tmp_path_factory.mktemp("tiny-bert")))


def deepspeed_config(stage):
    """A DeepSpeed config as Accelerate's own DeepSpeed tests write theirs: the optimizer and schedule
    named in it (the scripts reach them through Accelerate's DummyOptim and DummyScheduler)."""
    return {
        "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto", "torch_adam": True}},
        "scheduler": {
            "type": "WarmupDecayLR",
            "params": {
                "warmup_min_lr": "auto",
                "warmup_max_lr": "auto",
                "warmup_num_steps": "auto",
                "total_num_steps": "auto",
            },
        },
        "zero_optimization": {"stage": stage},
        "gradient_accumulation_steps": 1,
        "gradient_clipping": "auto",
        "train_batch_size": "auto",
        "train_micro_batch_size_per_gpu": "auto",
    }


FSDP2 = {"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2"}
LAUNCHES = {  # the variables `accelerate launch` sets for each kind of run, as Accelerate's CI runs them
    "ddp": {},
    "fsdp2": {**FSDP2, "FSDP_STATE_DICT_TYPE": "SHARDED_STATE_DICT"},
    "fsdp2-full": {**FSDP2, "FSDP_STATE_DICT_TYPE": "FULL_STATE_DICT"},
    "fsdp2-bert-layers": {
        **FSDP2,
        "FSDP_AUTO_WRAP_POLICY": "TRANSFORMER_BASED_WRAP",
        "FSDP_TRANSFORMER_CLS_TO_WRAP": "BertLayer",
        "FSDP_RESHARD_AFTER_FORWARD": "true",
    },
    "fsdp2-size": {
        **FSDP2,
        "FSDP_AUTO_WRAP_POLICY": "SIZE_BASED_WRAP",
        "FSDP_MIN_NUM_PARAMS": "2000",
        "FSDP_RESHARD_AFTER_FORWARD": "false",
    },
    "zero2": {"ACCELERATE_USE_DEEPSPEED": "true"},
    "zero3": {"ACCELERATE_USE_DEEPSPEED": "true"},
}


def launch_env(launch, folder):
    """What `accelerate launch` would set for ``launch``; a DeepSpeed launch's config is written into ``folder``."""
    env = dict(LAUNCHES[launch])
    if launch.startswith("zero"):
        pytest.importorskip("deepspeed", reason="the deepspeed extra is not installed")
        config = folder / "ds_config.json"
        config.write_text(json.dumps(deepspeed_config(int(launch[-1]))))
        env["ACCELERATE_DEEPSPEED_CONFIG_FILE"] = str(config)
    return env


@pytest.mark.parametrize("launch", ["ddp", "fsdp2", "fsdp2-full", "zero2", "zero3"])
def test_accelerates_checkpointing_script_resumes_on_trainer_core(tiny_bert, tmp_path, launch):
    """external_deps/test_checkpointing.py (a Transformers BERT, AdamW, a linear schedule, MRPC-shaped
    data offline): trained one epoch of two and saved; then resumed from that checkpoint, where the
    script itself asserts the accuracy, the scheduler's and the optimizer's rates and the epoch match
    what the first run recorded, as Accelerate's own CI runs it: plain, with FSDP2 (sharded and full
    state dicts) and with ZeRO-2 and ZeRO-3 set up by ``accelerate launch``'s variables."""
    env = launch_env(launch, tmp_path)

    def run(out, *extra):
        args = ["--model_name_or_path", tiny_bert, "--output_dir", tmp_path, "--num_epochs", 2, *extra]
        return run_script("test_checkpointing", tmp_path / out, tmp_path, script_args=args, launch_env=env)

    _passed_with_ours(*run("first", "--partial_train_epoch", 1))
    saved = {"ddp": "model.safetensors", "fsdp2": "pytorch_model_fsdp_0", "fsdp2-full": "pytorch_model_fsdp.bin"}
    assert (tmp_path / "state_0.json").exists() and (tmp_path / "epoch_0" / saved.get(launch, "pytorch_model")).exists()
    assert not (tmp_path / "epoch_1").exists()
    _passed_with_ours(*run("resumed", "--resume_from_checkpoint", tmp_path / "epoch_0"))


@pytest.mark.parametrize("launch", ["ddp", "fsdp2-bert-layers", "fsdp2-size", "zero3"])
def test_accelerates_performance_script_runs_on_trainer_core(tiny_bert, tmp_path, launch):
    """external_deps/test_performance.py: two epochs under ``accumulate``; the script asserts the
    rate after the first step and 0 at the end of its linear schedule, and that save_model wrote
    the model, as Accelerate's CI runs it: plain, FSDP2 wrapping each BertLayer (resharded after the
    forward) or by size (kept), and ZeRO-3 with the config's own optimizer and schedule."""
    args = ["--model_name_or_path", tiny_bert, "--output_dir", tmp_path, "--num_epochs", 2]
    env = launch_env(launch, tmp_path)
    _passed_with_ours(*run_script("test_performance", tmp_path / "run", tmp_path, script_args=args, launch_env=env))
    assert set(json.loads((tmp_path / "all_results.json").read_text())) == {"epoch-0", "epoch-1"}
