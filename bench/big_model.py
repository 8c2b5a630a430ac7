"""Loading a 403 MB model (12 transformer-style MLP blocks, float32, 100 MB safetensors shards):
load time and peak memory, each way in a fresh Python process.

* trainer_core ``load_checkpoint_and_dispatch`` into ``init_empty_weights``, all on the CPU, and with
  ``max_memory={"cpu": "150MB"}`` and the rest offloaded to disk;
* Hugging Face Accelerate's ``load_checkpoint_and_dispatch``, the same two ways;
* the naive way: build the model, ``torch.load`` the whole state dict, ``load_state_dict`` (twice the
  model in memory).

"peak above start" is the process's high-water RSS (``VmHWM``) after loading and one forward
pass, less what it was once torch was imported.

Run: make bench   (or: .venv/bin/python bench/big_model.py [--rounds 3])
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from statistics import median
from textwrap import dedent

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

from big_model_source import MODEL  # noqa: E402  (the model the tests load too)

LOAD = dedent("""
    import json, os, sys, tempfile, time, torch
    folder, way = sys.argv[1:3]
    sys.path.insert(0, folder)
    from bigmodel import Model
    def peak():   # VmHWM: this process's high-water RSS (ru_maxrss would start at the parent's)
        status = open("/proc/self/status").read()
        return int(status.split("VmHWM:")[1].split()[0]) * 1024
    library, _, budget = way.partition(":")
    if library == "trainer_core":
        from trainer_core.big_modeling import init_empty_weights, load_checkpoint_and_dispatch
    elif library == "accelerate":
        from accelerate import init_empty_weights, load_checkpoint_and_dispatch
    start = peak()
    began = time.perf_counter()
    if library == "naive":
        model = Model()
        model.load_state_dict(torch.load(os.path.join(folder, "model.pt")))
    else:
        with init_empty_weights():
            model = Model()
        memory = {"cpu": budget} if budget else None
        model = load_checkpoint_and_dispatch(model, os.path.join(folder, "checkpoint"), device_map="auto",
                                             max_memory=memory, no_split_module_classes=["Block"],
                                             offload_folder=tempfile.mkdtemp(dir=folder))
    loaded = time.perf_counter() - began
    x = torch.load(os.path.join(folder, "x.pt"))
    began = time.perf_counter()
    with torch.no_grad():
        model(x)
    forward = time.perf_counter() - began
    print(json.dumps({"load": loaded, "forward": forward, "peak": peak() - start}))
""")

WAYS = {
    "trainer_core, all on the CPU": "trainer_core",
    "accelerate, all on the CPU": "accelerate",
    "trainer_core, 150 MB CPU + disk": "trainer_core:150MB",
    "accelerate, 150 MB CPU + disk": "accelerate:150MB",
    "naive torch.load + load_state_dict": "naive",
}


def prepare(folder):
    from trainer_core.big_modeling import save_sharded

    with open(os.path.join(folder, "bigmodel.py"), "w") as file:
        file.write(MODEL)
    sys.path.insert(0, folder)
    from bigmodel import Model

    torch.manual_seed(0)
    model = Model()
    save_sharded(model.state_dict(), os.path.join(folder, "checkpoint"), max_shard_size="100MB")
    torch.save(model.state_dict(), os.path.join(folder, "model.pt"))
    torch.save(torch.randn(4, 1024), os.path.join(folder, "x.pt"))


def measure(folder, way):
    run = subprocess.run([sys.executable, "-c", LOAD, folder, way], capture_output=True, text=True, timeout=600)
    if run.returncode != 0:
        raise RuntimeError(f"{way} failed:\n{run.stderr}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        prepare(folder)
        results = {name: [] for name in WAYS}
        for _ in range(args.rounds):
            for name, way in WAYS.items():
                results[name].append(measure(folder, way))
    print(f"\nLoading a 403 MB model, fresh process each, {args.rounds} interleaved rounds (medians)\n")
    print(f"{'way':<38} {'load':>9} {'forward':>9} {'peak above start':>17}")
    for name, runs in results.items():
        load, forward = median(r["load"] for r in runs), median(r["forward"] for r in runs)
        peak = median(r["peak"] for r in runs) / 2**20
        print(f"{name:<38} {load:>8.2f}s {forward * 1000:>7.0f}ms {peak:>14.0f} MB")


if __name__ == "__main__":
    main()
