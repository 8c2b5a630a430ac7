"""Where each rank of a cluster launch runs, and the environment that follows from it (pure).

Ray places one actor per rank in a placement group; this module turns the actors' locations into
the torchrun numbering: ranks on one node get consecutive global ranks (rank 0's node first, then
the nodes in the order their first bundle appears), ``LOCAL_RANK`` counts within a node,
``NODE_RANK`` counts nodes, and every rank of a node sees all the GPUs Ray gave that node's ranks
(``CUDA_VISIBLE_DEVICES``), so ``cuda:LOCAL_RANK`` is its own GPU, as under torchrun.

Examples:
    >>> spots = [Spot("10.0.0.1", "a", ()), Spot("10.0.0.2", "b", ()), Spot("10.0.0.1", "a", ())]
    >>> layout = Layout.of(spots)
    >>> layout.order               # bundle of each global rank: node a's bundles first
    [0, 2, 1]
    >>> env = layout.environment(2, {"RANK": "2", "MASTER_ADDR": "127.0.0.1"}, threads=1)
    >>> env["NODE_RANK"], env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"], env["MASTER_ADDR"]
    ('1', '0', '1', '10.0.0.1')
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..base import Place

__all__ = ["Spot", "Layout"]


@dataclass(frozen=True)
class Spot:
    """Where one actor runs: its node's address and id, and the GPUs Ray assigned to it."""

    address: str
    node_id: str
    gpus: tuple[str, ...] = ()
    pid: int = 0


@dataclass(frozen=True)
class Layout:
    """The ranks of a launch over the nodes: ``order[rank]`` is the bundle (actor) carrying ``rank``."""

    spots: tuple[Spot, ...]
    order: list[int]

    @classmethod
    def of(cls, spots: Sequence[Spot]) -> Layout:
        """Number the ranks node by node, keeping bundle 0 as rank 0."""
        nodes: list[str] = []
        for spot in spots:
            if spot.node_id not in nodes:
                nodes.append(spot.node_id)
        order = sorted(range(len(spots)), key=lambda bundle: (nodes.index(spots[bundle].node_id), bundle))
        return cls(tuple(spots), order)

    @property
    def nodes(self) -> list[str]:
        """The node ids in node-rank order."""
        seen: list[str] = []
        for bundle in self.order:
            node = self.spots[bundle].node_id
            if node not in seen:
                seen.append(node)
        return seen

    def spot(self, rank: int) -> Spot:
        return self.spots[self.order[rank]]

    @property
    def master_addr(self) -> str:
        """Rank 0's node: it hosts the ranks' store."""
        return self.spot(0).address

    def node_rank(self, rank: int) -> int:
        return self.nodes.index(self.spot(rank).node_id)

    def node_ranks(self, node_rank: int) -> list[int]:
        """The global ranks on one node, in order."""
        node = self.nodes[node_rank]
        return [rank for rank in range(len(self.order)) if self.spot(rank).node_id == node]

    def environment(self, rank: int, env: dict[str, str], threads: int) -> dict[str, str]:
        """``env`` (the launch's environment of ``rank``) as it is on the rank's node."""
        node_rank = self.node_rank(rank)
        peers = self.node_ranks(node_rank)
        placed = {
            **env,
            "LOCAL_RANK": str(peers.index(rank)),
            "LOCAL_WORLD_SIZE": str(len(peers)),
            "NODE_RANK": str(node_rank),
            "GROUP_RANK": str(node_rank),
            "GROUP_WORLD_SIZE": str(len(self.nodes)),
            "MASTER_ADDR": self.master_addr,
            "OMP_NUM_THREADS": str(threads),
        }
        gpus = [gpu for peer in peers for gpu in self.spot(peer).gpus]
        if gpus:
            placed["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
        return placed

    def places(self) -> dict[int, Place]:
        """Each rank's node (by node rank) and that node's address, as the launch's views show it.

        Examples:
            >>> Layout.of([Spot("10.0.0.1", "a"), Spot("10.0.0.2", "b")]).places()[1]
            Place(node=1, address='10.0.0.2')
        """
        return {rank: Place(self.node_rank(rank), self.spot(rank).address) for rank in range(len(self.order))}

    def describe(self) -> list[str]:
        """One line per node: its address and its ranks."""
        lines = []
        for node_rank in range(len(self.nodes)):
            ranks = self.node_ranks(node_rank)
            address = self.spot(ranks[0]).address
            lines.append(f"node {node_rank} ({address}): rank{'s' if len(ranks) > 1 else ''} {_span(ranks)}")
        return lines


def _span(ranks: list[int]) -> str:
    if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    return ", ".join(map(str, ranks))
