from __future__ import annotations

import pytest

from megahour.train.emulation import NodeNetworkSpec, plan
from megahour.train.selfcheck import SHAPES
from megahour.train.spawn import run_local_world
from megahour.train.stepbench import optimizer_step_worker, percentile
from megahour.train.topology import Topology


def test_plan_caps_both_ends_of_every_node_link_and_tears_everything_down() -> None:
    spec = NodeNetworkSpec(nodes=2, inter_mbit=500)
    setup, teardown = plan(spec)
    shaped = [c for c in setup if "tbf" in c]
    assert len(shaped) == 4  # into and out of each node
    assert all("500mbit" in c for c in shaped)
    assert shaped[-1][:9] == ["ip", "netns", "exec", "mh-node1", "tc", "qdisc", "replace", "dev", "mh-n1"]
    assert ["ip", "-n", "mh-node1", "addr", "add", "10.213.77.2/24", "dev", "mh-n1"] in setup
    assert ["ip", "netns", "del", "mh-node0"] in teardown and teardown[-1] == ["ip", "link", "del", "mh-br0"]


def test_spec_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="positive"):
        NodeNetworkSpec(nodes=2, inter_mbit=0)
    with pytest.raises(ValueError, match="too few addresses"):
        NodeNetworkSpec(nodes=300, inter_mbit=1)


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0 and percentile(values, 99) == 99.0 and percentile([3.0], 99) == 3.0


def test_step_worker_times_every_strategy_and_books_bytes() -> None:
    reports = run_local_world(Topology(2, 2), optimizer_step_worker, shapes=list(SHAPES), steps=2, warmup=1)
    report = reports[0]
    assert set(report["strategies"]) == {"world", "per_node", "replicated"}
    assert report["strategies"]["per_node"]["muon_bytes_per_step"]["inter"] == 0
    assert report["strategies"]["world"]["muon_bytes_per_step"]["inter"] > 0
    assert all(r["mean_s"] > 0 and r["p99_s"] >= r["p50_s"] for r in report["strategies"].values())
    assert report["choice"]["links"]["source"] == "probe"
