"""CPU ranks: gloo collectives, one rank per core at most."""

from __future__ import annotations

import os


def usable_cpus():
    """The number of CPUs this process may run on (its affinity mask, not the machine's total)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


class CpuDevice:
    """Ranks on CPU cores.

    ``num_processes=None`` means one rank: spreading one model over every core of a laptop is
    rarely what a user means. More ranks than usable cores is refused, since they would only
    slow each other down.
    """

    name = "cpu"
    backend = "gloo"

    def count(self):
        return usable_cpus()

    def default_processes(self):
        return 1

    def process_rule(self, num_processes):
        return None

    def describe(self):
        n = self.count()
        return f"{n} CPU{'s' if n != 1 else ''}"
