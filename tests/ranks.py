"""Helper for trainer_core tests: run a function on N real gloo ranks and collect the return values.

More ranks than this machine has cores run oversubscribed (the launcher warns and allows it).
"""

from __future__ import annotations

from notebook_launcher import launch


def on_ranks(function, *args, num_processes=2, **options):
    """Every rank's return value of ``function(*args)``, launched with notebook_launcher."""
    job = launch(function, args, num_processes=num_processes, display="none", **options)
    job.wait(timeout=240)
    return job.results
