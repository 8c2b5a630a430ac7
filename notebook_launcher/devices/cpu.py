"""CPU ranks: gloo collectives."""

from __future__ import annotations

import os

from .base import fork_or_spawn
from .probe import usable_cpus

MAX_RANKS_PER_CPU = 4  # oversubscription refused beyond this many ranks per core, unless the variable allows it


def max_ranks_per_cpu() -> int:
    """Ranks allowed per core: ``NOTEBOOK_LAUNCHER_RANKS_PER_CPU`` or ``MAX_RANKS_PER_CPU``.

    Raises:
        ValueError: the variable is not a positive int.
    """
    value = os.environ.get("NOTEBOOK_LAUNCHER_RANKS_PER_CPU")
    if value is None:
        return MAX_RANKS_PER_CPU
    if not value.strip().isdigit() or int(value) < 1:
        raise ValueError(f"NOTEBOOK_LAUNCHER_RANKS_PER_CPU must be a positive int, got {value!r}")
    return int(value)


class CpuDevice:
    """Ranks on CPU cores.

    ``num_processes=None`` means one rank: spreading one model over every core of a laptop is
    rarely what a user means. More ranks than cores run oversubscribed with a one-line warning, as
    torchrun and Accelerate allow (people test 3- or 4-rank logic on a 2-vCPU Colab), up to
    ``MAX_RANKS_PER_CPU`` per core: a million ranks is a typo, not a plan.

    Examples:
        >>> CpuDevice().rank_environment({"RANK": "0"})["ACCELERATE_USE_CPU"]
        'true'
    """

    name = "cpu"
    backend = "gloo"

    def count(self) -> int:
        return usable_cpus()

    def default_processes(self) -> int:
        return 1

    def check_processes(self, num_processes: int) -> str | None:
        """Up to ``MAX_RANKS_PER_CPU`` ranks per core run oversubscribed; beyond that is a mistake
        (each rank is a copy of the kernel) unless ``NOTEBOOK_LAUNCHER_RANKS_PER_CPU`` allows it."""
        cores = self.count()
        allowed = max_ranks_per_cpu() * cores
        if num_processes <= allowed:
            return None
        return (
            f"num_processes={num_processes} is more than {allowed} ranks on {self.describe()} (each rank is a"
            f" process of its own); use at most {allowed}, or set NOTEBOOK_LAUNCHER_RANKS_PER_CPU to allow"
            f" more ranks per CPU (now {max_ranks_per_cpu()})"
        )

    def check_precision(self, mixed_precision: str) -> str | None:
        return None

    def stall_hint(self, num_processes: int) -> str | None:
        return None

    def oversubscription(self, num_processes: int) -> str | None:
        found = self.count()
        if num_processes <= found:
            return None
        return (
            f"notebook_launcher: {num_processes} ranks on {self.describe()}: the ranks share the cores"
            f" (oversubscribed), so each runs slower than it would alone"
        )

    def describe(self) -> str:
        n = self.count()
        return f"{n} CPU{'s' if n != 1 else ''}"

    def resolve_start_method(self, requested: str, hazards: list[str]) -> tuple[str, str | None]:
        return fork_or_spawn(requested, hazards)

    def rank_environment(self, env: dict[str, str]) -> dict[str, str]:
        """Hugging Face Accelerate reads ``ACCELERATE_USE_CPU`` to stay on the CPU next to a GPU."""
        return {**env, "ACCELERATE_USE_CPU": "true"}
