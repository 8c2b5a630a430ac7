"""Helpers for trainer_core tests: run a function on N real gloo ranks and collect the return values.

``on_ranks`` uses the launcher itself. ``on_ranks_mp`` uses ``torch.multiprocessing`` directly, for
more ranks than this machine has cores (the launcher refuses that on CPU by design).
"""

from __future__ import annotations

import os

import torch.multiprocessing as mp

from notebook_launcher import launch
from notebook_launcher.launching.ports import free_port


def on_ranks(function, *args, num_processes=2, **options):
    """Every rank's return value of ``function(*args)``, launched with notebook_launcher."""
    job = launch(function, args, num_processes=num_processes, display="none", **options)
    job.wait(timeout=240)
    return job.results


def _entry(rank, world, port, function, args, queue):
    os.environ.update(
        {
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": str(world),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "ACCELERATE_USE_CPU": "true",
            "OMP_NUM_THREADS": "1",
        }
    )
    queue.put((rank, function(*args)))


def on_ranks_mp(function, *args, num_processes=3):
    """Like ``on_ranks`` through ``torch.multiprocessing.start_processes`` (fork); small results only."""
    context = mp.get_context("fork")
    queue = context.SimpleQueue()
    mp.start_processes(
        _entry,
        args=(num_processes, free_port("127.0.0.1"), function, args, queue),
        nprocs=num_processes,
        start_method="fork",
    )
    results = dict(queue.get() for _ in range(num_processes))
    return [results[rank] for rank in range(num_processes)]
