"""Waiting until one of several descriptors is readable: what ``multiprocessing.connection.wait``
does, on one ``select.poll`` object made per call.

The supervisor waits once per round of its loop, right after the ranks were forked: every object a
wait makes or touches then costs a copy-on-write page fault. ``multiprocessing.connection.wait``
builds a selector with a key object per descriptor each time (measured: ~100 page faults of a quick
2-rank launch); this builds a dict and a poll object.

Examples:
    >>> import os
    >>> read_end, write_end = os.pipe()
    >>> wait_readable([read_end], timeout=0)
    []
    >>> _ = os.write(write_end, b"x")
    >>> wait_readable([read_end], timeout=0) == [read_end]
    True
"""

from __future__ import annotations

import math
import select
from collections.abc import Sequence
from typing import Any

__all__ = ["wait_readable"]


def wait_readable(objects: Sequence[Any], timeout: float | None = None) -> list[Any]:
    """Those of ``objects`` (descriptors, or objects with ``fileno()``) that are readable, hung up or
    closed, waiting up to ``timeout`` seconds for one (None: as long as it takes)."""
    poller = select.poll()
    by_descriptor: dict[int, list[Any]] = {}
    for item in objects:
        descriptor = item if isinstance(item, int) else item.fileno()
        if descriptor not in by_descriptor:
            by_descriptor[descriptor] = []
            poller.register(descriptor, select.POLLIN)
        by_descriptor[descriptor].append(item)
    wait_ms = None if timeout is None else max(0, math.ceil(timeout * 1000))
    return [item for descriptor, _ in poller.poll(wait_ms) for item in by_descriptor[descriptor]]
