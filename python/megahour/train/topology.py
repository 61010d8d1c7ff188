"""Where each rank sits: nodes x GPUs per node, and which link a byte between two ranks crosses.

Ranks are numbered node-major, as torchrun numbers them (``rank = node * local_world_size +
local_rank``), so ``node(r) = r // G``. A byte between two ranks of one node crosses the intra-node
link (NVLink on a GPU node, loopback in the emulation); any other byte crosses the inter-node fabric
(InfiniBand, or a rate-limited veth pair in the emulation).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum


class LinkClass(StrEnum):
    INTRA = "intra"
    INTER = "inter"


class TopologyError(ValueError):
    """The world cannot be split into equal nodes."""


@dataclass(frozen=True)
class Topology:
    nodes: int
    gpus_per_node: int

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.gpus_per_node < 1:
            raise TopologyError(
                f"a topology needs at least 1 node and 1 GPU per node, got {self.nodes} x "
                f"{self.gpus_per_node}"
            )

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    def node_of(self, rank: int) -> int:
        self._check_rank(rank)
        return rank // self.gpus_per_node

    def local_rank(self, rank: int) -> int:
        self._check_rank(rank)
        return rank % self.gpus_per_node

    def node_ranks(self, node: int) -> list[int]:
        if not 0 <= node < self.nodes:
            raise TopologyError(f"node {node} is outside 0..{self.nodes - 1}")
        start = node * self.gpus_per_node
        return list(range(start, start + self.gpus_per_node))

    def all_node_ranks(self) -> list[list[int]]:
        """Every node's ranks, in node order: the enumeration for ``new_subgroups_by_enumeration``."""
        return [self.node_ranks(n) for n in range(self.nodes)]

    def link(self, a: int, b: int) -> LinkClass:
        return LinkClass.INTRA if self.node_of(a) == self.node_of(b) else LinkClass.INTER

    def _check_rank(self, rank: int) -> None:
        if not 0 <= rank < self.world_size:
            raise TopologyError(f"rank {rank} is outside the world 0..{self.world_size - 1}")

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Topology:
        """The topology torchrun describes in ``WORLD_SIZE`` and ``LOCAL_WORLD_SIZE``.

        ``MEGAHOUR_GPUS_PER_NODE`` overrides ``LOCAL_WORLD_SIZE``: the emulation runs several
        "nodes" under one torchrun, and tests fake the grouping the same way.
        """
        try:
            world = int(env.get("WORLD_SIZE", "1"))
            local = int(env.get("MEGAHOUR_GPUS_PER_NODE") or env.get("LOCAL_WORLD_SIZE") or world)
        except ValueError as err:
            raise TopologyError(
                f"WORLD_SIZE / LOCAL_WORLD_SIZE must be integers ({err}); launch with torchrun"
            ) from None
        if local < 1 or world % local:
            raise TopologyError(
                f"WORLD_SIZE={world} is not a multiple of the ranks per node ({local}); set "
                "LOCAL_WORLD_SIZE (torchrun --nproc-per-node) or MEGAHOUR_GPUS_PER_NODE to a divisor"
            )
        return cls(nodes=world // local, gpus_per_node=local)
