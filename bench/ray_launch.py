"""Start-up of a launch on a Ray cluster: notebook_launcher(cluster="ray") first and later, beside a
local spawn launch and Ray Train's TorchTrainer running the same function, side by side.

A real two-node Ray cluster is started on this machine (``tests/ray_cluster.py``: 127.0.0.5 and
127.0.0.2, 2 CPUs each); this process is the driver, as a kernel is. The function: 4 ranks join a
gloo process group, all-reduce a tensor 4 times (4 "steps") and return. Times are call → return,
medians over ``--rounds`` later launches.

Targets (issue 23): later launches on a warm cluster within 2 x a local spawn launch, and faster
than TorchTrainer. Later launches of the two kinds alternate round by round, and the verdict is
the 95% interval's (``bench/intervals.py``), as the other benches decide theirs.

Run: .venv/bin/python bench/ray_launch.py [--rounds 5] [--trainer-rounds 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from statistics import median

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from intervals import decided, median_of, ratio_of_medians

RANKS = 4


def four_steps(_config=None):
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("gloo")
    value = torch.ones(8)
    for _ in range(4):
        dist.all_reduce(value)
    return value[0].item()


def timed(run) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--trainer-rounds", type=int, default=2)
    rounds = parser.parse_args()
    import ray
    from ray_cluster import LocalRayCluster

    from notebook_launcher import notebook_launcher
    from notebook_launcher.backends.ray import release_pool

    cluster = LocalRayCluster(cpus=2).start()
    os.environ["RAY_ADDRESS"] = cluster.address
    try:
        ray.init(address=cluster.address, log_to_driver=False)
        cluster.wait_for_nodes(ray)

        def ours():
            notebook_launcher(
                four_steps, num_processes=RANKS, cluster="ray", placement_strategy="SPREAD", display="none"
            )

        def local():
            notebook_launcher(four_steps, num_processes=RANKS, start_method="spawn", display="none")

        first = timed(ours)
        local_first = timed(local)
        warm, local_warm = [], []
        for _ in range(rounds.rounds):  # alternating: the machine's state falls on both alike
            warm.append(timed(ours))
            local_warm.append(timed(local))
        trainer = [timed(lambda: _torch_trainer(ray)) for _ in range(rounds.trainer_rounds)]
    finally:
        release_pool()
        ray.shutdown()
        cluster.stop()
    rows = [
        ("notebook_launcher, cluster='ray', first launch (cold actors)", first),
        ("notebook_launcher, cluster='ray', later launches (warm actors)", median(warm)),
        ("notebook_launcher, local spawn (start server), first launch", local_first),
        ("notebook_launcher, local spawn (start server), later launches", median(local_warm)),
        ("Ray Train TorchTrainer (every launch)", median(trainer)),
    ]
    print(f"\n{RANKS} ranks, 4 all-reduce steps; call -> return, seconds (median of later launches)\n")
    width = max(len(name) for name, _ in rows)
    print(f"{'launch':<{width}}  seconds")
    for name, seconds in rows:
        print(f"{name:<{width}}  {seconds:7.2f}")
    print(f"\nwarm cluster launch / local spawn launch ≤ 2x: {decided(*ratio_of_medians(warm, local_warm), 2.0)}")
    trainer_time = median(trainer)
    print(f"warm cluster launch < TorchTrainer ({trainer_time:.2f} s): {decided(*median_of(warm), trainer_time, 's')}")


def _torch_trainer(ray) -> None:
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    with tempfile.TemporaryDirectory() as storage:
        TorchTrainer(
            four_steps,
            scaling_config=ScalingConfig(num_workers=RANKS, use_gpu=False, placement_strategy="SPREAD"),
            run_config=RunConfig(storage_path=storage, name="bench"),
        ).fit()


if __name__ == "__main__":
    main()
