from __future__ import annotations

import math

import pytest

from megahour.train.costmodel import (
    DEFAULT_LINKS,
    LinkModel,
    busiest_ns_flops,
    muon_bytes,
    predict,
    select_strategy,
)
from megahour.train.muon import Strategy, ns_flops
from megahour.train.topology import Topology

# Llama-3-8B-like hidden matrices (anchors §8.4): 32 layers of q, o (dxd), k, v (1024xd), 3 MLP mats.
D, FF, KV = 4096, 14336, 1024
LLAMA8B = [(D, D), (D, D), (KV, D), (KV, D), (FF, D), (FF, D), (D, FF)] * 32
SMALL = [(64, 32), (32, 64), (48, 48)]


def test_the_8b_worked_example_figures() -> None:
    # M = 6.98e9 elements, ΣNS = 6.66e14 FLOP, world IB ingress per node = (N-1)/N·M·2
    m = sum(a * b for a, b in LLAMA8B)
    assert round(m / 1e9, 2) == 6.98
    assert round(sum(ns_flops(s) for s in LLAMA8B) / 1e14, 2) == 6.66
    world = muon_bytes(Strategy.WORLD, Topology(8, 8), LLAMA8B)
    assert round(world.ingress / 8 / 1e9, 1) == 12.2


def test_one_node_strategies_coincide_and_world_wins_the_tie() -> None:
    topo = Topology(1, 4)
    world = predict(Strategy.WORLD, topo, SMALL, DEFAULT_LINKS)
    per_node = predict(Strategy.PER_NODE, topo, SMALL, DEFAULT_LINKS)
    assert world.seconds == per_node.seconds and world.bytes == per_node.bytes
    # big matrices: sharding beats replication; tiny ones: not worth a broadcast
    assert select_strategy(Topology(1, 8), LLAMA8B, DEFAULT_LINKS).strategy is Strategy.WORLD
    assert select_strategy(topo, SMALL, DEFAULT_LINKS).strategy is Strategy.REPLICATED


def test_prediction_is_the_documented_formula() -> None:
    links = LinkModel(1e-3, 1e6, 2e-3, 1e5, 1e9)
    topo = Topology(2, 2)
    payload = sum(a * b for a, b in SMALL) * 2
    world = predict(Strategy.WORLD, topo, SMALL, links)
    assert math.isclose(world.comm_seconds, 3 * 2e-3 + payload / 1e5)
    assert math.isclose(world.compute_seconds, busiest_ns_flops(SMALL, 4) / 1e9)
    per_node = predict(Strategy.PER_NODE, topo, SMALL, links)
    assert math.isclose(per_node.seconds, 3 * 1e-3 + payload / 1e6 + busiest_ns_flops(SMALL, 2) / 1e9)
    replicated = predict(Strategy.REPLICATED, topo, SMALL, links)
    assert replicated.comm_seconds == 0 and math.isclose(
        replicated.compute_seconds, sum(ns_flops(s) for s in SMALL) / 1e9
    )


def _tail_bound_links(nodes: int) -> LinkModel:
    """A fabric whose per-broadcast latency grows with the ring (alpha = 50 us x N) and whose effective
    bandwidth is halved by the competing gradient all-reduce (eta = 0.5): per-node wins past some N."""
    return LinkModel(
        node_alpha_s=10e-6,
        node_bytes_per_s=360e9,
        world_alpha_s=50e-6 * nodes,
        world_bytes_per_s=175e9,
        ns_flops_per_s=400e12,
    )


def test_threshold_boundary_under_a_tail_bound_fabric() -> None:
    choices = {n: select_strategy(Topology(n, 8), LLAMA8B, _tail_bound_links(n)) for n in range(2, 65)}
    switch = min(n for n, c in choices.items() if c.strategy is Strategy.PER_NODE)
    assert all(choices[n].strategy is Strategy.WORLD for n in range(2, switch))
    assert all(choices[n].strategy is Strategy.PER_NODE for n in range(switch, 65))
    below = {p.strategy: p.seconds for p in choices[switch - 1].predictions}
    at = {p.strategy: p.seconds for p in choices[switch].predictions}
    assert below[Strategy.WORLD] <= below[Strategy.PER_NODE]
    assert at[Strategy.PER_NODE] < at[Strategy.WORLD]
    assert 2 < switch < 64


def test_bandwidth_bound_fabric_keeps_world_for_8b() -> None:
    # anchors §8.4: with eta≈1 world wins at every N for an 8B model
    for n in (2, 8, 32, 64):
        assert select_strategy(Topology(n, 8), LLAMA8B, DEFAULT_LINKS).strategy is Strategy.WORLD


def test_choice_is_logged_as_json_ready_dict() -> None:
    choice = select_strategy(Topology(2, 4), SMALL, DEFAULT_LINKS)
    data = choice.to_dict()
    assert data["strategy"] == choice.strategy.value
    assert set(data["predictions"]) == {"world", "per_node", "replicated"}
    assert data["predictions"]["per_node"]["bytes"]["inter"] == 0
    assert "2 node(s)" in data["reason"]


def test_link_model_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="node_bytes_per_s"):
        LinkModel(0, 0, 0, 1, 1)
    with pytest.raises(ValueError, match="world_alpha_s"):
        LinkModel(0, 1, -1, 1, 1)


def test_no_matrices_means_replicated() -> None:
    assert select_strategy(Topology(4, 8), []).strategy is Strategy.REPLICATED


def test_fully_sharded_is_a_candidate_only_when_asked() -> None:
    from megahour.train.costmodel import ALL_CANDIDATES

    default = select_strategy(Topology(4, 8), LLAMA8B, DEFAULT_LINKS)
    assert Strategy.FULLY_SHARDED not in {p.strategy for p in default.predictions}
    asked = select_strategy(Topology(4, 8), LLAMA8B, DEFAULT_LINKS, candidates=ALL_CANDIDATES)
    assert set(asked.to_dict()["predictions"]) == {"world", "per_node", "replicated", "fully_sharded"}
    with pytest.raises(ValueError, match="at least one candidate"):
        select_strategy(Topology(4, 8), LLAMA8B, DEFAULT_LINKS, candidates=())


def test_the_selector_picks_fully_sharded_exactly_when_the_model_says_so() -> None:
    from dataclasses import replace

    from megahour.train.costmodel import ALL_CANDIDATES

    topo = Topology(4, 8)
    # Unprobed: a pair costs two world latencies and its owner bytes (6/(2·S) of world's per matrix,
    # times S-1) go at the world rate: more than world's broadcast, so world wins.
    slow = select_strategy(topo, LLAMA8B, DEFAULT_LINKS, candidates=ALL_CANDIDATES)
    assert slow.strategy is Strategy.WORLD
    # A fabric where the gather/scatter pair is cheap (a probe said so): the same compute as world,
    # less comm.
    fast_links = replace(DEFAULT_LINKS, shard_alpha_s=1e-6, shard_bytes_per_s=1e13)
    fast = select_strategy(topo, LLAMA8B, fast_links, candidates=ALL_CANDIDATES)
    assert fast.strategy is Strategy.FULLY_SHARDED
    seconds = {p.strategy: p.seconds for p in fast.predictions}
    assert seconds[Strategy.FULLY_SHARDED] == min(seconds.values())


def test_fully_sharded_prediction_is_the_documented_formula() -> None:
    from megahour.train.costmodel import owner_shard_bytes, padded_shard_elements

    links = LinkModel(1e-3, 1e6, 2e-3, 1e5, 1e9, shard_alpha_s=5e-3, shard_bytes_per_s=2e5)
    topo = Topology(2, 2)
    shapes = [(7, 20), (3, 50), (13, 9)]
    p = predict(Strategy.FULLY_SHARDED, topo, shapes, links)
    assert (
        owner_shard_bytes(shapes, 4)
        == 3 * padded_shard_elements(shapes, 4) * 6
        == 3 * (2 * 20 + 50 + 4 * 9) * 6
    )
    assert math.isclose(p.comm_seconds, 3 * 5e-3 + owner_shard_bytes(shapes, 4) / 2e5)
    assert math.isclose(p.compute_seconds, busiest_ns_flops(shapes, 4) / 1e9)
    # HSDP with one node a shard group: node links, two node latencies a pair, no inter bytes
    hsdp = predict(Strategy.FULLY_SHARDED, topo, shapes, links, shard_size=2)
    assert math.isclose(hsdp.comm_seconds, 3 * 2e-3 + owner_shard_bytes(shapes, 2) / 1e6)
    assert hsdp.bytes.inter == 0


def test_fully_sharded_bytes_at_four_nodes_in_closed_form() -> None:
    """The issue's "at 4 nodes fully sharded moves >= 4x per-node's broadcast bytes", on this ledger:
    with rows divisible by W the total is 6·M·(W-1)/W against per-node's 2·M·N·(G-1), so the ratio is
    3(W-1)/(W·N(G-1)): 21/32 at 4x2 and 93/896 at 4x8; inter and ingress are 6·M·(N-1)/N against 0."""
    from fractions import Fraction

    m = sum(a * b for a, b in LLAMA8B)  # every row count divisible by 32
    for n, g in ((4, 2), (4, 8)):
        topo = Topology(n, g)
        w = topo.world_size
        fs = muon_bytes(Strategy.FULLY_SHARDED, topo, LLAMA8B)
        pn = muon_bytes(Strategy.PER_NODE, topo, LLAMA8B)
        assert fs.intra + fs.inter == 6 * m * (w - 1) // w
        assert fs.inter == fs.ingress == 6 * m * (n - 1) // n
        assert pn.intra == 2 * m * n * (g - 1) and pn.inter == pn.ingress == 0
        assert Fraction(fs.intra + fs.inter, pn.intra) == Fraction(3 * (w - 1), w * n * (g - 1))
    assert Fraction(3 * 7, 8 * 4 * 1) == Fraction(21, 32)
    assert Fraction(3 * 31, 32 * 4 * 7) == Fraction(93, 896)
