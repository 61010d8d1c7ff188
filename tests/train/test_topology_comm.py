from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from megahour.train.comm import ByteLedger
from megahour.train.costmodel import grad_allreduce_bytes, muon_bytes
from megahour.train.muon import Strategy, assign_owners
from megahour.train.topology import LinkClass, Topology, TopologyError


def test_ranks_are_node_major_like_torchrun() -> None:
    topo = Topology(nodes=3, gpus_per_node=2)
    assert topo.world_size == 6
    assert [topo.node_of(r) for r in range(6)] == [0, 0, 1, 1, 2, 2]
    assert [topo.local_rank(r) for r in range(6)] == [0, 1, 0, 1, 0, 1]
    assert topo.all_node_ranks() == [[0, 1], [2, 3], [4, 5]]
    assert topo.link(2, 3) is LinkClass.INTRA and topo.link(1, 2) is LinkClass.INTER
    with pytest.raises(TopologyError, match="outside the world"):
        topo.node_of(6)


def test_from_env_reads_torchrun_and_names_the_fix() -> None:
    assert Topology.from_env({"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4"}) == Topology(2, 4)
    # the emulation groups ranks into nodes itself
    env = {"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "8", "MEGAHOUR_GPUS_PER_NODE": "2"}
    assert Topology.from_env(env) == Topology(4, 2)
    assert Topology.from_env({}) == Topology(1, 1)
    with pytest.raises(TopologyError, match="LOCAL_WORLD_SIZE"):
        Topology.from_env({"WORLD_SIZE": "6", "LOCAL_WORLD_SIZE": "4"})
    with pytest.raises(TopologyError, match="integers"):
        Topology.from_env({"WORLD_SIZE": "two"})
    with pytest.raises(TopologyError):
        Topology(0, 4)


def test_ledger_books_a_broadcast_by_link_class() -> None:
    ledger = ByteLedger(Topology(nodes=2, gpus_per_node=4))
    ledger.broadcast(100, src=1, group=range(8), tag="muon")
    entry = ledger["muon"]
    assert (entry.intra, entry.inter, entry.ingress, entry.collectives) == (300, 400, 100, 1)
    ledger.broadcast(100, src=5, group=[4, 5, 6, 7], tag="muon")
    assert (entry.intra, entry.inter, entry.ingress, entry.collectives) == (600, 400, 100, 2)
    with pytest.raises(ValueError, match="not in its group"):
        ledger.broadcast(1, src=0, group=[4, 5], tag="muon")


def test_ledger_books_a_hierarchical_allreduce() -> None:
    topo = Topology(nodes=2, gpus_per_node=4)
    ledger = ByteLedger(topo)
    ledger.all_reduce(1000, group=range(8), tag="grad")
    assert ledger["grad"] == grad_allreduce_bytes(topo, 1000)
    assert ledger["grad"].to_dict() == {"intra": 12000, "inter": 2000, "ingress": 2000, "collectives": 1}


def _simulate(strategy: Strategy, topo: Topology, shapes: list[tuple[int, int]]) -> ByteLedger:
    """The broadcast schedule ShardedMuon runs, booked into a ledger without any process group."""
    ledger = ByteLedger(topo)
    if strategy is Strategy.REPLICATED or topo.world_size == 1:
        return ledger
    groups = [list(range(topo.world_size))] if strategy is Strategy.WORLD else topo.all_node_ranks()
    for group in groups:
        if len(group) == 1:
            continue
        owners = assign_owners(shapes, len(group))
        for shape, owner in zip(shapes, owners, strict=True):
            ledger.broadcast(shape[0] * shape[1] * 2, src=group[owner], group=group, tag="muon")
    return ledger


@given(
    nodes=st.integers(1, 6),
    gpus=st.integers(1, 8),
    shapes=st.lists(st.tuples(st.integers(1, 64), st.integers(1, 64)), min_size=1, max_size=20),
    strategy=st.sampled_from([Strategy.REPLICATED, Strategy.WORLD, Strategy.PER_NODE]),
)
@settings(max_examples=200, deadline=None)
def test_closed_forms_equal_the_booked_schedule(nodes, gpus, shapes, strategy) -> None:
    topo = Topology(nodes, gpus)
    assert _simulate(strategy, topo, shapes)["muon"] == muon_bytes(strategy, topo, shapes)


@given(
    nodes=st.integers(2, 8),
    gpus=st.integers(1, 8),
    shapes=st.lists(st.tuples(st.integers(1, 32), st.integers(1, 32)), min_size=1, max_size=8),
)
@settings(max_examples=100, deadline=None)
def test_per_node_moves_no_inter_node_bytes(nodes, gpus, shapes) -> None:
    topo = Topology(nodes, gpus)
    per_node = muon_bytes(Strategy.PER_NODE, topo, shapes)
    world = muon_bytes(Strategy.WORLD, topo, shapes)
    assert per_node.inter == per_node.ingress == 0
    m_bytes = sum(a * b for a, b in shapes) * 2
    assert world.ingress == (nodes - 1) * m_bytes  # (N-1)/N·M·b_u per node
    assert world.inter == m_bytes * (topo.world_size - gpus)


def test_ledger_books_gather_and_scatter_per_sender_with_ingress_equal_to_inter() -> None:
    ledger = ByteLedger(Topology(nodes=2, gpus_per_node=4))
    ledger.gather(100, root=1, group=range(8), tag="muon")
    entry = ledger["muon"]
    assert entry.to_dict() == {"intra": 300, "inter": 400, "ingress": 400, "collectives": 1}
    ledger.scatter(50, root=5, group=range(8), tag="muon")
    assert entry.to_dict() == {"intra": 450, "inter": 600, "ingress": 600, "collectives": 2}
    ledger.scatter(10, root=4, group=[4, 5], tag="muon")
    assert entry.to_dict() == {"intra": 460, "inter": 600, "ingress": 600, "collectives": 3}
    with pytest.raises(ValueError, match="gather root rank 0 is not in its group"):
        ledger.gather(1, root=0, group=[4, 5], tag="muon")


def test_a_handed_in_node_group_must_be_this_ranks_node() -> None:
    from megahour.train.comm import Comm

    sentinel = object()
    comm = Comm(Topology(2, 2), rank=2, node_group=sentinel)
    comm.group_ranks = lambda group: [0, 1]  # type: ignore[method-assign]
    with pytest.raises(ValueError, match=r"rank 2's node is \[2, 3\].*mesh\['intra'\]"):
        comm.node_group()
    comm.group_ranks = lambda group: [2, 3]  # type: ignore[method-assign]
    assert comm.node_group() is sentinel


def _simulate_fully_sharded(topo: Topology, shapes: list[tuple[int, int]], shard: int) -> ByteLedger:
    """The gather/scatter schedule of ShardedMuon's fully_sharded step, booked without a process group:
    shard groups of ``shard`` consecutive ranks, LPT owners, chunks padded to ceil(rows/S) rows."""
    ledger = ByteLedger(topo)
    if shard == 1:
        return ledger
    owners = assign_owners(shapes, shard)
    for start in range(0, topo.world_size, shard):
        group = list(range(start, start + shard))
        for (rows, cols), owner in zip(shapes, owners, strict=True):
            padded = -(-rows // shard) * cols
            ledger.gather(padded * 4, root=group[owner], group=group, tag="muon")
            ledger.scatter(padded * 2, root=group[owner], group=group, tag="muon")
    return ledger


@given(
    nodes=st.integers(1, 6),
    gpus=st.sampled_from([1, 2, 4, 8]),
    shapes=st.lists(st.tuples(st.integers(1, 64), st.integers(1, 64)), min_size=1, max_size=12),
    shard_choice=st.integers(0, 10),
)
@settings(max_examples=200, deadline=None)
def test_fully_sharded_closed_form_equals_the_booked_schedule(nodes, gpus, shapes, shard_choice) -> None:
    from megahour.train.costmodel import fully_sharded_bytes

    topo = Topology(nodes, gpus)
    w = topo.world_size
    valid = [s for s in range(1, w + 1) if w % s == 0 and (s % gpus == 0 or gpus % s == 0)]
    shard = valid[shard_choice % len(valid)]
    assert _simulate_fully_sharded(topo, shapes, shard)["muon"] == fully_sharded_bytes(topo, shapes, shard)
    assert muon_bytes(Strategy.FULLY_SHARDED, topo, shapes) == fully_sharded_bytes(topo, shapes, w)


def test_fully_sharded_shard_sizes_outside_the_closed_forms_are_refused() -> None:
    from megahour.train.costmodel import fully_sharded_bytes

    with pytest.raises(ValueError, match="does not tile"):
        fully_sharded_bytes(Topology(2, 4), [(8, 8)], shard_size=6)
