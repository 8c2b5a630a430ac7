"""Helper for trainer_core tests: run a function on N real gloo ranks and collect the return values.

More ranks than this machine has cores run oversubscribed (the launcher warns and allows it).
"""

from __future__ import annotations

from notebook_launcher import launch

RANKS_TIMEOUT = 150.0  # seconds: a launch past it ends with LaunchTimeout and every rank's stack


def on_ranks(function, *args, num_processes=2, **options):
    """Every rank's return value of ``function(*args)``, launched with notebook_launcher.

    A launch that hangs fails with the launcher's own ``LaunchTimeout``, which shows where each
    rank was; a launcher that could not end it is caught by pytest-timeout, which shows every thread.
    """
    options.setdefault("timeout", RANKS_TIMEOUT)
    job = launch(function, args, num_processes=num_processes, display="none", **options)
    job.wait()
    return job.results


def seeded_order(seed=7):
    """A loader generator for tests that compare N ranks with one process: its sampler's order is
    the same everywhere. (A plain ``shuffle=True`` shuffles as Accelerate does, which differs between
    one process and several: tests/trainer/test_same_seed.py.)"""
    import torch

    return torch.Generator().manual_seed(seed)
