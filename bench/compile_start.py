"""torch.compile in a launch: how long until the first step, cold and on a second launch, side by side.

The function (every contender runs the same one): a 12-block MLP (LayerNorm, Linear 256, GELU) wrapped in DDP over gloo
and ``torch.compile``d (Inductor), one step (forward, backward, optimizer), then 20 more timed
steps. Ranks write when their first step ended and their later steps' median; the table shows, per
contender, the seconds from the launch call to the last rank's first step, and the step time after
compile. Every row starts from an empty Inductor cache (its own ``TORCHINDUCTOR_CACHE_DIR``), in a
fresh kernel that imported torch in an earlier cell, as a notebook that trains has:

* ``one process alone``: the function in one process, no launcher (the reference the target is set
  against: a cold launch of 4 ranks on 2 cores ≤ 1.2× it);
* ``notebook_launcher``: 4 ranks, fork; then a second launch of the same function in that kernel
  (target: first step ≤ 2 s);
* ``persistent workers``: ``start_workers`` (counted in the cold row), then ``workers.run`` of the
  function twice: the second call runs in ranks whose compiled code is still loaded;
* Hugging Face Accelerate's ``notebook_launcher`` and raw ``torch.multiprocessing.start_processes``
  (fork), each 4 ranks, cold and then again in the same kernel.

Run: .venv/bin/python bench/compile_start.py [--ranks 4] [--device cuda]   (the GPU pass: one rank per GPU)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from textwrap import dedent

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from kernel import BenchKernel

FUNCTION = dedent("""
    import json, os, statistics, time
    def train(started, out, device="cpu"):
        import torch, torch.distributed as dist
        if device == "cuda":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        if "RANK" in os.environ and not dist.is_initialized():
            dist.init_process_group("nccl" if device == "cuda" else "gloo")
        torch.manual_seed(0)
        def block():
            return torch.nn.Sequential(torch.nn.LayerNorm(256), torch.nn.Linear(256, 256), torch.nn.GELU())
        blocks = [block() for _ in range(12)]
        model = torch.nn.Sequential(*blocks, torch.nn.Linear(256, 1)).to(device)
        model = torch.compile(model)  # then DDP around it: torch.compile(DDP(...)) compiles nothing on CPU ranks
        if dist.is_initialized():
            model = torch.nn.parallel.DistributedDataParallel(model)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        x = torch.randn(64, 256, device=device)
        def step():
            model(x).pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
            if device == "cuda":
                torch.cuda.synchronize()
        step()
        first = time.time() - started
        times = []
        for _ in range(20):
            begun = time.perf_counter()
            step()
            times.append(time.perf_counter() - begun)
        rank = os.environ.get("RANK", "0")
        with open(os.path.join(out, f"{rank}.json"), "w") as file:
            json.dump({"first": first, "step_ms": 1000 * statistics.median(times)}, file)
    def by_index(index, started, out, device="cpu"):     # torch.multiprocessing's signature
        os.environ.update(RANK=str(index), LOCAL_RANK=str(index))
        train(started, out, device)
""")

LAUNCH_TIMEOUT = 600  # seconds a launch may take before it is reported as hung (and its kernel's tree ended)
LAUNCHES = {
    "notebook_launcher": (
        "from notebook_launcher import notebook_launcher",
        "notebook_launcher(train, (time.time(), OUT, {device!r}), num_processes={ranks}, display='none')",
    ),
    "accelerate": (
        "from accelerate import notebook_launcher",
        "notebook_launcher(train, (time.time(), OUT, {device!r}), num_processes={ranks})",
    ),
    "persistent workers": (  # started once: a second run is a call into ranks that compiled already
        "from notebook_launcher import start_workers\nstarted = time.time()\n"
        "workers = start_workers({ranks}, display='none')",
        "workers.run(train, started if 'started' in globals() else time.time(), OUT, {device!r})\n"
        "globals().pop('started', None)",
    ),
    "torch.multiprocessing": (
        "import torch.multiprocessing as torch_mp\nos.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT='29561',"
        " WORLD_SIZE='{ranks}')",
        "torch_mp.start_processes(by_index, (time.time(), OUT, {device!r}), nprocs={ranks}, start_method='fork')",
    ),
}


def _collected(out: str) -> dict:
    found = []
    for name in sorted(os.listdir(out)):
        with open(os.path.join(out, name)) as file:
            found.append(json.load(file))
        os.unlink(os.path.join(out, name))
    return {"first": max(r["first"] for r in found), "step_ms": max(r["step_ms"] for r in found)}


def one_process(cache: str, device: str) -> dict:
    out = tempfile.mkdtemp()
    # torch and its compiler imported first, as the kernels' ranks have them (forked from a kernel that did)
    code = (
        FUNCTION
        + f"\nimport time, torch, torch._dynamo, torch._inductor.compile_fx\ntrain(time.time(), {out!r}, {device!r})\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    subprocess.run([sys.executable, "-c", code], check=True, env={**env, "TORCHINDUCTOR_CACHE_DIR": cache})
    return _collected(out)


def launched(name: str, ranks: int, device: str) -> tuple[dict | None, dict | None]:
    """(cold, second) for one contender, in one fresh kernel with an empty cache (None: it hung)."""
    importing, launching = LAUNCHES[name]
    out = tempfile.mkdtemp()
    kernel = BenchKernel()
    try:
        cache = tempfile.mkdtemp()
        # torch imported in an earlier cell, as a notebook that trains has it (the row alone imports it too)
        kernel.run(f"import os, time, torch\nos.environ['TORCHINDUCTOR_CACHE_DIR'] = {cache!r}\nOUT = {out!r}")
        if name in ("notebook_launcher", "persistent workers"):  # their own folder, empty (else the variable is kept)
            kernel.run("del os.environ['TORCHINDUCTOR_CACHE_DIR']")
        kernel.run(importing.format(ranks=ranks) + "\n" + FUNCTION)
        rows: list[dict | None] = []
        for _ in range(2):
            try:
                kernel.run(launching.format(ranks=ranks, device=device), timeout=LAUNCH_TIMEOUT)
            except TimeoutError:  # Accelerate's elastic agent can wait for ever in its rendezvous
                return (rows[0] if rows else None), None
            rows.append(_collected(out))
        return rows[0], rows[1]
    finally:
        kernel.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="cuda: one rank per GPU")
    arguments = parser.parse_args()
    ranks, device = arguments.ranks, arguments.device
    alone = one_process(tempfile.mkdtemp(), device)
    rows: list[tuple[str, dict | None, dict | None]] = [("one process alone", alone, None)]
    for name in LAUNCHES:
        cold, second = launched(name, ranks, device)
        rows.append((name, cold, second))
    where = f"{os.cpu_count()} cores" if device == "cpu" else f"{ranks} GPUs"
    print()  # the table starts after a blank line (bench/gpu/report.py reads it from there)
    print(f"torch.compile, {ranks} ranks on {where} (fork), a 12-block MLP, empty caches; seconds")
    print(f"{'':24}{'cold: first step':>18}{'× alone':>9}{'second launch':>15}{'step ms':>9}")
    for name, cold, second in rows:
        if cold is None:
            print(f"{name:24}{'hung: no return in ' + str(LAUNCH_TIMEOUT) + ' s':>51}")
            continue
        again = f"{second['first']:.1f}" if second else ("hung" if name != "one process alone" else "-")
        ratio = cold["first"] / alone["first"]
        print(f"{name:24}{cold['first']:>18.1f}{ratio:>9.2f}{again:>15}{cold['step_ms']:>9.1f}")
    ours = {name: (cold, second) for name, cold, second in rows}["notebook_launcher"]
    assert ours[0] is not None and ours[1] is not None
    print(
        f"targets: cold ≤ 1.2× alone: {'met' if ours[0]['first'] <= 1.2 * alone['first'] else 'not met'};"
        f" second launch ≤ 2 s: {'met' if ours[1]['first'] <= 2.0 else 'not met'}"
    )


if __name__ == "__main__":
    main()
