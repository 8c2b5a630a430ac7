"""Hugging Face Accelerate's example scripts on 2 CPU ranks: Accelerate vs trainer_core, final weights.

Each run of the table is one of Accelerate's ``examples/`` scripts with the arguments Accelerate's
own ``tests/test_examples.py`` gives it, launched by torchrun on 2 CPU ranks (as ``accelerate launch
--cpu``) twice: once as written, once with ``Accelerator`` imported from trainer_core
(``tests/accelerate_examples.py``; MRPC-shaped data, its metric and a tiny local BERT stand in for
the downloads). Columns: whether each run finished, the largest difference between the two
runs' final weights (same seed; ``0`` is bit-identical), and how far trainer_core's run moved the
weights from those it prepared (the scale against which the difference reads). A run that resumes another's checkpoint
also shows, per library, how far its weights end from the uninterrupted run's. Target (issue 24):
every run Accelerate finishes also finishes with trainer_core, weights within 1e-6 — or, for a
resumed run, trainer_core's equal to its uninterrupted run's (trainer_core resumes an epoch's exact
order and random streams; Accelerate redraws the first epoch's order after a resume).

The examples ship in neither Accelerate's wheel nor its sdist, so this needs a checkout of its
repository: ``--examples PATH/examples`` (or ``NL_ACCELERATE_EXAMPLES``), of the release installed.

Run: .venv/bin/python bench/accelerate_examples.py --examples ../accelerate/examples [--only NAME]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import torch

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path.insert(0, str(TESTS))

from accelerate_offline import make_tiny_bert, make_tiny_causal_lm, text_lines  # noqa: E402

from notebook_launcher.launching.ports import free_port  # noqa: E402

HARNESS = TESTS / "accelerate_examples.py"
LIBRARIES = ("accelerate", "trainer_core")
TOLERANCE = 1e-6


@dataclass(frozen=True)
class Run:
    """One row: an example script, its arguments, what ``accelerate launch`` would set, a package it
    needs, and the run whose checkpoint it resumes. Arguments and settings name the run's own folder
    ``{out}``, the resumed run's ``{previous}``, the stand-ins' folder ``{data}`` and models
    ``{bert}`` and ``{causal}``."""

    script: str
    args: tuple[str, ...] = ()
    launch_env: dict[str, str] = field(default_factory=dict)
    needs: str | None = None
    after: str | None = None


FSDP2 = {"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2", "FSDP_STATE_DICT_TYPE": "SHARDED_STATE_DICT"}


# The DeepSpeed example trains with the script's own torch AdamW and schedule when the config names
# none (Accelerate, which trains with DDP on CPUs, then runs the same arithmetic).
def zero(stage: int) -> dict[str, str]:
    return {"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_CONFIG_FILE": f"{{data}}/zero{stage}.json"}


CLM_ARGS = (
    "--train_file", "{data}/train.txt", "--validation_file", "{data}/validation.txt",
    "--model_name_or_path", "{causal}", "--block_size", "16", "--per_device_train_batch_size", "4",
    "--per_device_eval_batch_size", "4", "--num_train_epochs", "2", "--seed", "42",
    "--checkpointing_steps", "epoch", "--output_dir", "{out}",
)  # fmt: skip

RUNS = {
    "nlp_example": Run("nlp_example.py"),
    "complete_nlp_example": Run("complete_nlp_example.py", ("--output_dir", "{out}")),
    "checkpointing (by epoch)": Run(
        "by_feature/checkpointing.py", ("--checkpointing_steps", "epoch", "--output_dir", "{out}")
    ),
    "checkpointing (resume epoch_0)": Run(
        "by_feature/checkpointing.py",
        ("--resume_from_checkpoint", "{previous}/epoch_0"),
        after="checkpointing (by epoch)",
    ),
    "checkpointing (by steps)": Run(
        "by_feature/checkpointing.py", ("--checkpointing_steps", "1", "--output_dir", "{out}")
    ),
    "checkpointing (resume step_2)": Run(
        "by_feature/checkpointing.py",
        ("--resume_from_checkpoint", "{previous}/step_2"),
        after="checkpointing (by steps)",
    ),
    "cross_validation": Run("by_feature/cross_validation.py", ("--num_folds", "2")),
    "multi_process_metrics": Run("by_feature/multi_process_metrics.py"),
    "schedule_free": Run("by_feature/schedule_free.py", needs="schedulefree"),
    "tracking": Run(  # log_with="all": every tracker installed, offline
        "by_feature/tracking.py",
        ("--with_tracking", "--project_dir", "{out}"),
        launch_env={"WANDB_MODE": "offline", "MLFLOW_ALLOW_FILE_STORE": "true", "MLFLOW_TRACKING_URI": "./mlruns"},
        needs="tensorboard",
    ),
    "gradient_accumulation": Run("by_feature/gradient_accumulation.py"),
    "automatic_gradient_accumulation": Run("by_feature/automatic_gradient_accumulation.py"),
    "memory": Run("by_feature/memory.py"),
    "local_sgd": Run("by_feature/local_sgd.py"),
    "early_stopping": Run("by_feature/early_stopping.py"),
    "profiler": Run("by_feature/profiler.py"),
    "ddp_comm_hook (fp16)": Run("by_feature/ddp_comm_hook.py", ("--ddp_comm_hook", "fp16")),
    "gradient_accumulation_for_autoregressive_models": Run(
        "by_feature/gradient_accumulation_for_autoregressive_models.py", ("--gradient_accumulation_steps", "2")
    ),
    "deepspeed_with_config_support (ZeRO-2)": Run(
        "by_feature/deepspeed_with_config_support.py", CLM_ARGS, zero(2), needs="deepspeed"
    ),
    "deepspeed_with_config_support (ZeRO-3)": Run(
        "by_feature/deepspeed_with_config_support.py", CLM_ARGS, zero(3), needs="deepspeed"
    ),
    "deepspeed_with_config_support (ZeRO-3, best)": Run(  # loads the best epoch's checkpoint at the end
        "by_feature/deepspeed_with_config_support.py", (*CLM_ARGS, "--load_best_model"), zero(3), needs="deepspeed"
    ),
    "fsdp_with_peak_mem_tracking (FSDP2)": Run(
        "by_feature/fsdp_with_peak_mem_tracking.py",
        ("--model_name_or_path", "{bert}", "--output_dir", "{out}"),
        launch_env=FSDP2,
    ),
}


class Outcome(NamedTuple):
    """One run: how long it took, its folder, what the harness saved (``{"final": ..., "initial":
    ...}``, None when the run did not finish) and the first error it printed."""

    seconds: float
    folder: Path
    saved: dict | None
    tail: str

    @property
    def finished(self) -> bool:
        return self.saved is not None


def stand_ins(root: Path) -> dict[str, str]:
    """A folder in ``root`` with text files and DeepSpeed configs, and the tiny models: the
    placeholders' values."""
    data = root / "stand-ins"
    data.mkdir()
    for seed, name in enumerate(("train", "validation")):
        (data / f"{name}.txt").write_text("\n".join(text_lines(seed, 256 if name == "train" else 64)))
    for stage in (2, 3):
        config = {"zero_optimization": {"stage": stage}, "gradient_clipping": "auto", "gradient_accumulation_steps": 1}
        config |= {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto"}
        (data / f"zero{stage}.json").write_text(json.dumps(config))
    bert, causal = make_tiny_bert(str(data / "bert")), make_tiny_causal_lm(str(data / "causal"))
    return {"data": str(data), "bert": bert, "causal": causal}


def run_once(examples: Path, run: Run, library: str, previous: Outcome | None, given: dict, root: Path) -> Outcome:
    """One example on 2 ranks under ``library``, in a folder of its own in ``root`` (``previous``:
    the run it resumes). Its temporary files (torchrun's logs, the libraries') go there too."""
    out = Path(tempfile.mkdtemp(prefix=f"{library}-", dir=root))
    places = {**given, "out": out, "previous": previous.folder if previous else out}
    args = [a.format(**places) for a in run.args]
    weights = out / "weights.pt"
    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1", "TMPDIR": str(root)}
    env |= {"NL_TINY_BERT": given["bert"], "NL_TINY_CAUSAL_LM": given["causal"]}
    env.update({key: value.format(**places) for key, value in run.launch_env.items()})
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(TESTS.parent), env.get("PYTHONPATH", "")])
    port = str(free_port("127.0.0.1"))
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", port]
    command += [str(HARNESS), str(examples / run.script), str(weights), "--library", library, "--", *args]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env, cwd=out)
    seconds = time.perf_counter() - started
    (out / "output.txt").write_text(done.stdout + done.stderr)
    saved = torch.load(weights) if done.returncode == 0 and weights.exists() else None
    return Outcome(seconds, out, saved, _first_error(done.stdout + done.stderr))


def _first_error(output: str) -> str:
    """The first traceback a rank printed (its last 30 lines), else the output's end."""
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if "Traceback (most recent call last)" in line), None)
    if start is None:
        return "\n".join(lines[-30:])
    end = next((i for i in range(start + 1, len(lines)) if lines[i] and not lines[i].startswith((" ", "["))), start)
    return "\n".join(lines[max(start, end - 30) : end + 1])


def difference(first: Outcome | None, second: Outcome) -> float:
    """The largest absolute difference between two runs' final weights (inf when their keys differ;
    nan when either did not finish)."""
    if first is None or first.saved is None or second.saved is None:
        return float("nan")
    return _largest_difference(first.saved["final"], second.saved["final"])


def moved(outcome: Outcome) -> float:
    """How far a run's training moved its weights: the largest change from those handed to prepare."""
    if outcome.saved is None:
        return float("nan")
    final, initial = outcome.saved["final"], outcome.saved["initial"]
    common = final.keys() & initial.keys()
    return _largest_difference({k: final[k] for k in common}, {k: initial[k] for k in common})


def _largest_difference(a: dict, b: dict) -> float:
    if a.keys() != b.keys():
        return float("inf")
    return max(((a[k] - b[k]).abs().max().item() for k in a if a[k].numel()), default=0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", default=os.environ.get("NL_ACCELERATE_EXAMPLES"), type=Path)
    parser.add_argument("--only", action="append", help="run only these rows (and the runs they resume)")
    parser.add_argument("--verbose", action="store_true", help="print the output's end of a run that failed")
    parser.add_argument("--keep", action="store_true", help="keep every run's folder (checkpoints, output)")
    options = parser.parse_args()
    if options.examples is None or not (options.examples / "nlp_example.py").exists():
        parser.error("give --examples: the examples/ folder of a checkout of Accelerate's repository")
    unknown = sorted(set(options.only or ()) - set(RUNS))
    if unknown:
        parser.error(f"no such run: {', '.join(unknown)} (the runs: {', '.join(RUNS)})")
    chosen = [n for n in RUNS if not options.only or n in options.only or any(RUNS[o].after == n for o in options.only)]

    root = Path(tempfile.mkdtemp(prefix="accelerate-examples-"))
    try:
        compare(options, chosen, root)
    finally:
        if options.keep:
            print(f"every run's folder is in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def compare(options: argparse.Namespace, chosen: list[str], root: Path) -> None:
    """Run the ``chosen`` rows under both libraries, in folders in ``root``, and print the table."""
    given = stand_ins(root)
    outcomes: dict[tuple[str, str], Outcome] = {}
    columns = f"{'run':48} {'Accelerate':>12} {'trainer_core':>13} {'max |dw|':>10} {'moved':>9}  {'result':16}"
    print(f"{columns} resumed vs uninterrupted")
    tally: dict[str, int] = {}
    for name in chosen:
        run = RUNS[name]
        if run.needs and importlib.util.find_spec(run.needs) is None:
            print(f"{name:48} {'':>12} {'':>13} {'':>10}  skipped: {run.needs} is not installed")
            continue
        for library in LIBRARIES:
            previous = outcomes.get((run.after, library))  # the run this one resumes, if any
            outcomes[(name, library)] = run_once(options.examples, run, library, previous, given, root)
        theirs, ours = outcomes[(name, "accelerate")], outcomes[(name, "trainer_core")]
        delta = difference(theirs, ours)
        drift = {}
        if run.after:  # a resumed run against the uninterrupted run it resumed, per library
            drift = {lib: difference(outcomes[(run.after, lib)], outcomes[(name, lib)]) for lib in LIBRARIES}
        result = verdict(theirs.finished, ours.finished, delta, drift.get("trainer_core"))
        tally[result] = tally.get(result, 0) + 1
        state = lambda o: f"{'ok' if o.finished else 'FAILED'} {o.seconds:4.0f}s"
        resumed = "  ".join(f"{lib} {value:.1e}" for lib, value in drift.items())
        travel = moved(ours)
        print(f"{name:48} {state(theirs):>12} {state(ours):>13} {delta:10.1e} {travel:9.1e}  {result:16} {resumed}")
        for label, outcome in (("accelerate", theirs), ("trainer_core", ours)):
            if options.verbose and not outcome.finished:
                print(f"--- {label} ---\n{outcome.tail}")
    print("\n" + ", ".join(f"{count} {result}" for result, count in sorted(tally.items())))


def verdict(theirs: bool, ours: bool, delta: float, drift: float | None) -> str:
    """A row's result: "same" weights; "resumes exactly" (a resumed run that differs from
    Accelerate's but ends on its own uninterrupted run's weights); "only ours runs"; "both fail";
    "FAILS" or "DIFFERENT" (trainer_core misses the target)."""
    if not ours:
        return "both fail" if not theirs else "FAILS"
    if not theirs:
        return "only ours runs"
    if delta <= TOLERANCE:
        return "same"
    return "resumes exactly" if drift is not None and drift <= TOLERANCE else "DIFFERENT"


if __name__ == "__main__":
    main()
