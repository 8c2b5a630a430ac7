"""CPU ranks: gloo collectives."""

from __future__ import annotations

from .base import fork_or_spawn
from .probe import usable_cpus


class CpuDevice:
    """Ranks on CPU cores.

    ``num_processes=None`` means one rank: spreading one model over every core of a laptop is
    rarely what a user means. More ranks than cores run oversubscribed with a one-line warning, as
    torchrun and Accelerate allow (people test 3- or 4-rank logic on a 2-vCPU Colab).

    Example:
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
