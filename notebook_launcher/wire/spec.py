"""Who a rank is, as the kernel tells it: its spec (rank, environment, the kernel's pid, its thread
budget and output settings) and the descriptors of its pipes. Plain data that the backends build and
the rank's bootstrap reads, so neither imports the other.

Examples:
    >>> spec = RankSpec(1, 1, {"RANK": "1"}, parent_pid=100, threads=2)
    >>> spec.rank, spec.flush_interval, spec.encoded_env
    (1, 0.05, ((b'RANK', b'1'),))
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..choices import FLUSH_INTERVAL

__all__ = ["RankSeat", "RankPipes", "RankSpec", "encoded_environment"]


@dataclass(frozen=True)
class RankSpec:
    """Who a rank is: its global and local rank, its environment, the kernel's pid and its thread budget."""

    rank: int
    local_rank: int
    env: dict
    parent_pid: int
    threads: int
    tensor_prefix: str | None = None  # where large returned tensors go (``wire.shared_tensors``)
    launcher_pid: int = 0  # the kernel that launched it (the parent may be a start server)
    flush_interval: float = FLUSH_INTERVAL  # seconds between output flushes (the kernel's setting)
    cgroup: str | None = None  # the cgroup the rank moves into first (``rank.containers``), if any
    # ``env`` as the byte strings ``os.environ`` keeps on POSIX, encoded where the spec is made (a
    # forked rank pays a copied page for each object it makes)
    encoded_env: tuple = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "encoded_env", encoded_environment(self.env))


@dataclass(frozen=True)
class RankSeat:
    """A rank the launch core asks a starter for, as plain data: its global and local rank and the
    torchrun environment of a rank of this machine. The starter makes its ``RankSpec`` (the pids,
    the thread budget, where large results go: what only the backend knows)."""

    rank: int
    local_rank: int
    env: dict


@dataclass(frozen=True)
class RankPipes:
    """A rank process's ends of its three pipes, as file descriptors in that process."""

    events: int
    stdout: int
    stderr: int


def encoded_environment(env: dict) -> tuple:
    """``env`` as the (key, value) byte strings ``os.environ`` holds on POSIX; () elsewhere."""
    if os.name != "posix":
        return ()
    return tuple((os.fsencode(key), os.fsencode(value)) for key, value in env.items())
