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

``fully_sharded`` (FSDP2 parameters, shard groups of ``S`` consecutive ranks: ``S = W`` for a 1-D mesh,
``S = G`` for HSDP with one node a shard group; ``R = W/S`` replica groups) sends per matrix an fp32
update shard from every member to the owner (gather) and a BF16 ``O`` shard back (scatter), each padded
to ``c_i = ceil(a_i/S)`` rows. With ``F = Σ c_i·b_i`` padded shard elements and ``b_f = 4``:

=========== ===================================== ====================================== ============
strategy    intra                                 inter = node ingress                   collectives
=========== ===================================== ====================================== ============
fully, S≥G  R·(G-1)·F·(b_f+b_u)                   R·(S-G)·F·(b_f+b_u)                    2·R·P
fully, S≤G  R·(S-1)·F·(b_f+b_u)                   0                                      2·R·P
=========== ===================================== ====================================== ============

Every shard is distinct data, so no hierarchical algorithm shares it: ingress equals inter. With rows
divisible by ``S``, ``F = M/S``; then ``S = W`` gives inter ``(N-1)/N·M·6``, against world's ``(W-G)·M·2``
logical and ``(N-1)·M·2`` ingress, and per-node's 0.

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
SHARD_INPUT_BYTES = 4  # the fp32 momentum update gathered to the owner under fully_sharded


def muon_elements(shapes: Sequence[Sequence[int]]) -> int:
    return sum(int(s[0]) * int(s[1]) for s in shapes)


def muon_bytes(
    strategy: Strategy,
    topology: Topology,
    shapes: Sequence[Sequence[int]],
    update_bytes: int = UPDATE_BYTES,
    shard_size: int | None = None,
) -> LinkBytes:
    """The Muon traffic of one step, as the ledger books it (job totals). ``shard_size``: the FSDP
    shard group's size under ``fully_sharded`` (default the world); the other strategies ignore it."""
    n, g, w = topology.nodes, topology.gpus_per_node, topology.world_size
    if strategy is Strategy.FULLY_SHARDED:
        return fully_sharded_bytes(topology, shapes, shard_size, update_bytes)
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


def shard_size_for(topology: Topology, shard_size: int | None) -> int:
    """The shard group's size (``None``: the whole world, a 1-D FSDP mesh), checked against the
    layouts the closed forms cover: consecutive blocks of ranks that are whole nodes or part of one."""
    w, g = topology.world_size, topology.gpus_per_node
    s = w if shard_size is None else shard_size
    if s < 1 or w % s or (s % g and g % s):
        raise ValueError(
            f"shard size {s} does not tile a {topology.nodes}x{g} world into whole nodes or parts of one; "
            f"use a divisor of {g} or a multiple of it that divides {w}"
        )
    return s


def padded_shard_elements(shapes: Sequence[Sequence[int]], shard_size: int) -> int:
    """``Σ ceil(a_i/S)·b_i``: the elements one member sends (or receives) per step, padding included."""
    return sum(-(-int(a) // shard_size) * int(b) for a, b in shapes)


def fully_sharded_bytes(
    topology: Topology,
    shapes: Sequence[Sequence[int]],
    shard_size: int | None = None,
    update_bytes: int = UPDATE_BYTES,
    input_bytes: int = SHARD_INPUT_BYTES,
) -> LinkBytes:
    """The ``fully_sharded`` Muon traffic of one step (gathers plus scatters), as the ledger books it."""
    s = shard_size_for(topology, shard_size)
    if s == 1 or not shapes:
        return LinkBytes()
    g = topology.gpus_per_node
    replicas = topology.world_size // s
    chunk = padded_shard_elements(shapes, s) * (input_bytes + update_bytes)
    same, other = (g - 1, s - g) if s >= g else (s - 1, 0)  # members on and off the owner's node
    inter = replicas * other * chunk
    return LinkBytes(
        intra=replicas * same * chunk, inter=inter, ingress=inter, collectives=2 * replicas * len(shapes)
    )


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
    # A fully_sharded gather plus scatter over the world: fixed seconds a pair, and the owner's bytes
    # (sent plus received) a second. None: not probed; the model uses two world broadcasts' latency and
    # the world broadcast bandwidth.
    shard_alpha_s: float | None = None
    shard_bytes_per_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("node_bytes_per_s", "world_bytes_per_s", "ns_flops_per_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"link model {name} must be positive, got {getattr(self, name)}")
        if self.shard_bytes_per_s is not None and not self.shard_bytes_per_s > 0:
            raise ValueError(f"link model shard_bytes_per_s must be positive, got {self.shard_bytes_per_s}")
        if self.shard_alpha_s is not None and self.shard_alpha_s < 0:
            raise ValueError(f"link model shard_alpha_s must not be negative, got {self.shard_alpha_s}")
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


def owner_shard_bytes(shapes: Sequence[Sequence[int]], shard_size: int) -> int:
    """Bytes through one owner's links if it owned every matrix: ``(S-1)·F·(b_f+b_u)``. The steps run
    one collective at a time, so the step's comm time is this over the owner's rate."""
    return (shard_size - 1) * padded_shard_elements(shapes, shard_size) * (SHARD_INPUT_BYTES + UPDATE_BYTES)


def predict_fully_sharded(
    topology: Topology,
    shapes: Sequence[Sequence[int]],
    links: LinkModel,
    ns_steps: int = 5,
    shard_size: int | None = None,
) -> Prediction:
    """``t = P·alpha_pair + (S-1)·F·6 / beta_owner + NS_busiest / F``: a gather and a scatter a matrix.

    Inside one node the node links' broadcast figures stand in (two latencies a pair); across nodes
    the probed gather/scatter figures, or, unprobed, the world broadcast's.
    """
    s = shard_size_for(topology, shard_size)
    compute = busiest_ns_flops(shapes, s, ns_steps) / links.ns_flops_per_s
    if s == 1:
        comm = 0.0
    else:
        if s <= topology.gpus_per_node:
            alpha, beta = 2 * links.node_alpha_s, links.node_bytes_per_s
        else:
            alpha = links.shard_alpha_s if links.shard_alpha_s is not None else 2 * links.world_alpha_s
            beta = links.shard_bytes_per_s if links.shard_bytes_per_s is not None else links.world_bytes_per_s
        comm = len(shapes) * alpha + owner_shard_bytes(shapes, s) / beta
    return Prediction(
        strategy=Strategy.FULLY_SHARDED,
        seconds=comm + compute,
        comm_seconds=comm,
        compute_seconds=compute,
        bytes=fully_sharded_bytes(topology, shapes, s),
    )


def predict(
    strategy: Strategy,
    topology: Topology,
    shapes: Sequence[Sequence[int]],
    links: LinkModel,
    ns_steps: int = 5,
    shard_size: int | None = None,
) -> Prediction:
    """Predicted optimizer-step time of ``strategy`` on the busiest rank."""
    if strategy is Strategy.FULLY_SHARDED:
        return predict_fully_sharded(topology, shapes, links, ns_steps, shard_size)
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


DDP_CANDIDATES: tuple[Strategy, ...] = (Strategy.WORLD, Strategy.PER_NODE, Strategy.REPLICATED)
"""What a model with whole (DDP-replicated) parameters can run; ``fully_sharded`` needs FSDP2 ones."""
ALL_CANDIDATES: tuple[Strategy, ...] = (*DDP_CANDIDATES, Strategy.FULLY_SHARDED)


def select_strategy(
    topology: Topology,
    shapes: Sequence[Sequence[int]],
    links: LinkModel = DEFAULT_LINKS,
    ns_steps: int = 5,
    candidates: Sequence[Strategy | str] = DDP_CANDIDATES,
    shard_size: int | None = None,
) -> Choice:
    """The strategy with the smallest predicted step time. Ties go to the earlier candidate.

    ``candidates``: the strategies the caller can run; add ``fully_sharded`` only when the Muon
    parameters are FSDP2-sharded (``shard_size``: their shard group's size, default the world).
    """
    if not candidates:
        raise ValueError("select_strategy needs at least one candidate; pass e.g. DDP_CANDIDATES")
    if not shapes:
        return Choice(Strategy.REPLICATED, topology, [], links, "no Muon matrices: nothing to shard")
    predictions = [predict(Strategy(s), topology, shapes, links, ns_steps, shard_size) for s in candidates]
    best = min(predictions, key=lambda p: p.seconds)  # min keeps the first of equal values
    others = ", ".join(f"{p.strategy.value} {p.seconds * 1e3:.3f} ms" for p in predictions)
    reason = (
        f"{topology.nodes} node(s) x {topology.gpus_per_node}: predicted {others}; links from {links.source}"
    )
    if topology.nodes == 1:
        reason += " (one node: world and per_node are the same schedule)"
    return Choice(best.strategy, topology, predictions, links, reason)
