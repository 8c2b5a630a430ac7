"""One compile for every rank: ``torch.compile`` in a launch compiles each graph once, not once per rank.

The kernel gives every local rank the same private cache folder (``cache``: Inductor's FX graph,
AOTAutograd and code caches, and Triton's), kept for the kernel's life, so a second launch of the
same function starts from what the first compiled. In each rank (``serial``), Inductor compiles
one graph at a time across the kernel's ranks: the first to reach a graph compiles it, and every
other rank then finds it in the shared cache instead of compiling it again on the same cores.
A function whose code compiles (``expected``) has torch and Inductor imported by the process the
ranks are forked from, once, instead of by every rank.
"""

from .cache import compile_cache_dir, compile_environment, forget_attempt, remove_compile_cache
from .expected import COMPILER_MODULES, compiles
from .serial import LOCK_VARIABLE, compile_one_at_a_time

__all__ = [
    "COMPILER_MODULES",
    "LOCK_VARIABLE",
    "compile_cache_dir",
    "compile_environment",
    "compile_one_at_a_time",
    "compiles",
    "forget_attempt",
    "remove_compile_cache",
]
