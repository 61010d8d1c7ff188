"""The cost model: closed-form bytes per strategy, a calibrated time model, and the strategy selector.

Bytes (``../shared/reference/muon-anchors.md`` §8.3), per optimizer step, summed over the job, with
``M`` Muon elements, ``P`` Muon matrices, ``b_u = 2`` (the BF16 update), ``N`` nodes, ``G`` ranks a node
and ``W = N·G``:

=========== ================== ================ ================== ==============
strategy    intra              inter            node ingress       collectives
=========== ================== ================ ================== ==============
replicated  0                  0                0                  0
world       M·b_u·(G-1)        M·b_u·(W-G)      M·b_u·(N-1)        P
per_node    N·(G-1)·M·b_u      0                0                  N·P
=========== ================== ================ ================== ==============

(For ``W = 1`` every strategy moves nothing.) The gradient all-reduce, common to all three, is
``2·N·(G-1)·B`` intra and ``2·(N-1)·B`` inter for a ``B``-byte bucket (see ``comm``).

Time (§8.4), for the optimizer step on the busiest rank::

    t(strategy) = collectives_on_a_rank · alpha_group + M·b_u / beta_group + NS_busiest / F

where ``alpha_group``, ``beta_group`` are a broadcast's latency and payload bandwidth over the strategy's
group (the world, or one node), and ``F`` is a rank's Newton-Schulz FLOP rate. ``probe`` measures all three at
job start; :data:`DEFAULT_LINKS` is a fallback shaped like an NVLink/InfiniBand node. The selector picks
the smallest predicted time; with one node ``world`` and ``per_node`` are the same schedule, and the
tie goes to ``world``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from megahour.train.comm import LinkBytes
from megahour.train.muon import Strategy, assign_owners, ns_flops
from megahour.train.topology import Topology

UPDATE_BYTES = 2  # the BF16 update O


def muon_elements(shapes: Sequence[Sequence[int]]) -> int:
    return sum(int(s[0]) * int(s[1]) for s in shapes)


def muon_bytes(
    strategy: Strategy, topology: Topology, shapes: Sequence[Sequence[int]], update_bytes: int = UPDATE_BYTES
) -> LinkBytes:
    """The Muon traffic of one step, as the ledger books it (job totals)."""
    n, g, w = topology.nodes, topology.gpus_per_node, topology.world_size
    payload = muon_elements(shapes) * update_bytes
    count = len(shapes)
    if strategy is Strategy.REPLICATED or w == 1:
        return LinkBytes()
    if strategy is Strategy.WORLD:
        return LinkBytes(
            intra=payload * (g - 1), inter=payload * (w - g), ingress=payload * (n - 1), collectives=count
        )
    if g == 1:  # one rank a node: nothing to share inside a node, every node works alone
        return LinkBytes()
    return LinkBytes(intra=n * (g - 1) * payload, inter=0, ingress=0, collectives=n * count)


def grad_allreduce_bytes(topology: Topology, bucket_bytes: int) -> LinkBytes:
    """One all-reduce of a ``bucket_bytes`` gradient bucket over the world, as the ledger books it."""
    n, g = topology.nodes, topology.gpus_per_node
    if topology.world_size == 1:
        return LinkBytes()
    return LinkBytes(
        intra=2 * n * (g - 1) * bucket_bytes,
        inter=2 * (n - 1) * bucket_bytes,
        ingress=2 * (n - 1) * bucket_bytes,
        collectives=1,
    )


@dataclass(frozen=True)
class LinkModel:
    """Broadcast cost over one node's group and over the world, and a rank's Newton-Schulz rate.

    ``*_alpha_s`` is a broadcast's fixed cost in seconds; ``*_bytes_per_s`` its payload bandwidth
    (payload bytes over the broadcast's time). ``ns_flops_per_s`` is measured on BF16 matrices.
    """

    node_alpha_s: float
    node_bytes_per_s: float
    world_alpha_s: float
    world_bytes_per_s: float
    ns_flops_per_s: float
    source: str = "default"

    def __post_init__(self) -> None:
        for name in ("node_bytes_per_s", "world_bytes_per_s", "ns_flops_per_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"link model {name} must be positive, got {getattr(self, name)}")
        for name in ("node_alpha_s", "world_alpha_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"link model {name} must not be negative, got {getattr(self, name)}")

    def to_dict(self) -> dict[str, float | str]:
        return asdict(self)


# An H100/H200 node: NVLink ~360 GB/s a GPU; a world broadcast spread by NCCL over the node's 8 x 400 Gb/s
# InfiniBand NICs (~350 GB/s, ~87% of line rate), microseconds of latency inside a node against tens
# across the fabric; ~400 TFLOP/s BF16. Real jobs replace these with the probe's figures.
DEFAULT_LINKS = LinkModel(
    node_alpha_s=10e-6,
    node_bytes_per_s=360e9,
    world_alpha_s=50e-6,
    world_bytes_per_s=350e9,
    ns_flops_per_s=400e12,
)


@dataclass(frozen=True)
class Prediction:
    strategy: Strategy
    seconds: float
    comm_seconds: float
    compute_seconds: float
    bytes: LinkBytes


@dataclass(frozen=True)
class Choice:
    """The selector's answer, with what it compared, for the job log."""

    strategy: Strategy
    topology: Topology
    predictions: list[Prediction] = field(default_factory=list)
    links: LinkModel = DEFAULT_LINKS
    reason: str = ""

    def to_dict(self) -> dict[str, object]:
        return {
            "strategy": self.strategy.value,
            "nodes": self.topology.nodes,
            "gpus_per_node": self.topology.gpus_per_node,
            "reason": self.reason,
            "links": self.links.to_dict(),
            "predictions": {
                p.strategy.value: {
                    "seconds": p.seconds,
                    "comm_seconds": p.comm_seconds,
                    "compute_seconds": p.compute_seconds,
                    "bytes": p.bytes.to_dict(),
                }
                for p in self.predictions
            },
        }


def busiest_ns_flops(shapes: Sequence[Sequence[int]], group_size: int, ns_steps: int = 5) -> int:
    """Newton-Schulz FLOPs on the most loaded member of a sharding group (the LPT layout)."""
    owners = assign_owners(shapes, group_size, ns_steps)
    load = [0] * group_size
    for shape, owner in zip(shapes, owners, strict=True):
        load[owner] += ns_flops(shape, ns_steps)
    return max(load) if load else 0


def predict(
    strategy: Strategy,
    topology: Topology,
    shapes: Sequence[Sequence[int]],
    links: LinkModel,
    ns_steps: int = 5,
) -> Prediction:
    """Predicted optimizer-step time of ``strategy`` on the busiest rank."""
    payload = muon_elements(shapes) * UPDATE_BYTES
    if strategy is Strategy.REPLICATED or topology.world_size == 1:
        group_size, alpha, bandwidth = 1, 0.0, math.inf
    elif strategy is Strategy.WORLD and topology.nodes > 1:
        group_size, alpha, bandwidth = topology.world_size, links.world_alpha_s, links.world_bytes_per_s
    else:  # per_node, or world on one node, which is the same group
        group_size, alpha, bandwidth = topology.gpus_per_node, links.node_alpha_s, links.node_bytes_per_s
    compute = busiest_ns_flops(shapes, group_size, ns_steps) / links.ns_flops_per_s
    comm = 0.0 if group_size == 1 else len(shapes) * alpha + payload / bandwidth
    return Prediction(
        strategy=strategy,
        seconds=comm + compute,
        comm_seconds=comm,
        compute_seconds=compute,
        bytes=muon_bytes(strategy, topology, shapes),
    )


def select_strategy(
    topology: Topology,
    shapes: Sequence[Sequence[int]],
    links: LinkModel = DEFAULT_LINKS,
    ns_steps: int = 5,
    candidates: Sequence[Strategy] = (Strategy.WORLD, Strategy.PER_NODE, Strategy.REPLICATED),
) -> Choice:
    """The strategy with the smallest predicted step time. Ties go to the earlier candidate."""
    if not shapes:
        return Choice(Strategy.REPLICATED, topology, [], links, "no Muon matrices: nothing to shard")
    predictions = [predict(s, topology, shapes, links, ns_steps) for s in candidates]
    best = min(predictions, key=lambda p: p.seconds)  # min keeps the first of equal values
    others = ", ".join(f"{p.strategy.value} {p.seconds * 1e3:.3f} ms" for p in predictions)
    reason = (
        f"{topology.nodes} node(s) x {topology.gpus_per_node}: predicted {others}; links from {links.source}"
    )
    if topology.nodes == 1:
        reason += " (one node: world and per_node are the same schedule)"
    return Choice(best.strategy, topology, predictions, links, reason)
