"""Ranks on a Ray cluster, driven from this kernel: ``launch(..., cluster="ray")``.

``options`` checks the arguments, ``connect`` reaches the cluster, ``pool`` keeps warm rank actors
(``host.RankHost``) in a placement group, ``placement`` numbers the ranks node by node, ``starter``
and ``group`` plug them into the launcher (its ``Starter``, ``Meeting`` and ``RankGroup``), so the
cell, widget, record and errors are those of a local launch. Ray is imported only for a cluster
launch (``pip install 'notebook-launcher[ray]'``).

Examples:
    >>> release_pool()      # the kernel's warm actors, if any, are released; False: there were none
    False
"""

from __future__ import annotations

from .pool import pool_info, release_pool

__all__ = ["release_pool", "pool_info"]
