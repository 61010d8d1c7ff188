"""Every strategy on real gloo process groups of 1-8 local ranks grouped as nodes.

Each layout is one local world (spawned processes); the worker (``megahour.train.selfcheck``) steps
``ShardedMuon`` and single-process ``torch.optim.Muon`` on the same all-reduced gradients and books
every collective. Seven mixed-shape matrices: divisible by no world size here.
"""

from __future__ import annotations

import pytest

from megahour.train.selfcheck import equivalence_worker, probe_worker
from megahour.train.spawn import run_local_world
from megahour.train.topology import Topology

LAYOUTS = [(1, 1), (1, 4), (2, 2), (2, 4), (4, 2)]
STRATEGIES = ("replicated", "world", "per_node")


@pytest.fixture(scope="module", params=LAYOUTS, ids=[f"{n}x{g}" for n, g in LAYOUTS])
def layout_reports(request):
    nodes, gpus = request.param
    topology = Topology(nodes, gpus)
    return topology, run_local_world(topology, equivalence_worker, steps=3, strategies=STRATEGIES)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_rank_is_bit_exact_to_torch_muon(layout_reports, strategy) -> None:
    topology, reports = layout_reports
    for rank, report in enumerate(reports):
        r = report[strategy]
        assert r["params_equal"], f"rank {rank}: parameters differ from torch.optim.Muon"
        assert r["momentum_equal"], f"rank {rank}: momentum of owned matrices differs"
        assert r["momentum_elsewhere"] == 0, f"rank {rank} keeps momentum for matrices it does not own"
    # every matrix is owned once per sharding group, so every momentum buffer was compared
    groups = 1 if strategy == "world" else topology.nodes if strategy == "per_node" else topology.world_size
    assert sum(len(r[strategy]["owned"]) for r in reports) == 7 * groups


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_replicas_are_identical_on_every_rank_and_node(layout_reports, strategy) -> None:
    _, reports = layout_reports
    assert len({r[strategy]["digest"] for r in reports}) == 1


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_booked_bytes_equal_the_cost_model_exactly(layout_reports, strategy) -> None:
    topology, reports = layout_reports
    booked = reports[0][strategy]["muon_bytes"]
    assert booked == reports[0][strategy]["expected_muon_bytes"]
    if strategy == "per_node":
        assert booked["inter"] == 0 and booked["ingress"] == 0
    if strategy == "world" and topology.nodes > 1:
        assert booked["inter"] > 0


def test_probe_calibrates_every_link_and_every_rank_agrees() -> None:
    reports = run_local_world(Topology(2, 2), probe_worker)
    choices = [r["choice"] for r in reports]
    assert all(c == choices[0] for c in choices[1:]), "ranks chose differently"
    links = choices[0]["links"]
    assert links["source"] == "probe"
    assert links["node_bytes_per_s"] > 0 and links["world_bytes_per_s"] > 0 and links["ns_flops_per_s"] > 0
    assert sum(r["probe_bytes"]["inter"] for r in reports) > 0  # the world probe crossed "nodes"


def test_override_is_kept_and_says_what_the_model_picked() -> None:
    reports = run_local_world(Topology(1, 2), probe_worker, override="per_node")
    assert all(r["choice"]["strategy"] == "per_node" for r in reports)
    reason = reports[0]["choice"]["reason"]
    assert reason.startswith("overridden (the model ")  # "agrees" or "picked world" / "picked replicated"
    assert len(reports[0]["choice"]["predictions"]) == 3
