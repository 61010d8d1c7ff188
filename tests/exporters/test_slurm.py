"""The Slurm collector on real Slurm answers: 24.11's node, GPU and queue captures and 22.05's
(tests/slurm/captures/SOURCES.md), through the adapter's exact commands."""

from __future__ import annotations

import pytest

from megahour.exporters import slurm
from megahour.metrics.textfile import render
from megahour.slurm.client import SlurmClient
from megahour.slurm.parse import parse_sinfo_nodes
from tests.slurm.fixtures import SINFO, FakeRunner, capture


def series(families, name):
    family = next((f for f in families if f.name == name), None)
    assert family is not None, f"no {name}"
    return {tuple(sorted(s.labels.items())): s.value for s in family.samples}


def runner_2411(moment: str) -> FakeRunner:
    return FakeRunner(
        {
            "sinfo --noheader": (capture(f"slurm2411-sinfo-nodes-format-{moment}.txt"), "", 0),
            "sinfo --json": (capture(f"slurm2411-sinfo-{moment}.json"), "", 0),
            "scontrol show nodes --json": (capture(f"slurm2411-scontrol-show-nodes-{moment}.json"), "", 0),
            "squeue --json": (
                capture(f"slurm2411-squeue-{'drained' if moment == 'drained' else 'mixed'}.json"),
                "",
                0,
            ),
        }
    )


def test_a_draining_node_with_a_gpu_in_use_and_a_pending_job(check_metrics):
    got = slurm.collect(SlurmClient(runner=runner_2411("draining")), now=100.0)
    assert not got.failed and got.problems == [] and got.counts == {"nodes": 1, "gres": 1, "queue": 2}
    families = got.families
    assert series(families, "megahour_slurm_node_state") == {(("node", "s2411"), ("state", "draining")): 1}
    assert series(families, "megahour_slurm_nodes") == {(("state", "draining"),): 1}
    assert series(families, "megahour_slurm_gpus_allocated") == {(("node", "s2411"),): 1}
    assert series(families, "megahour_slurm_jobs") == {
        (("partition", "gpu"), ("state", "PENDING")): 1,
        (("partition", "gpu"), ("state", "RUNNING")): 1,
    }
    assert series(families, "megahour_slurm_jobs_pending") == {
        (("partition", "gpu"), ("reason", "Resources")): 1
    }
    assert series(families, "megahour_slurm_exporter_ok") == {(): 1}
    check_metrics(render(families))


def test_a_drained_idle_node_holds_no_gpu():
    families = slurm.collect(SlurmClient(runner=runner_2411("drained")), now=100.0).families
    assert series(families, "megahour_slurm_node_state") == {(("node", "s2411"), ("state", "drained")): 1}
    assert series(families, "megahour_slurm_gpus_allocated") == {(("node", "s2411"),): 0}
    # this squeue answer lists no job (the cancelled ones had aged out): the family is there, empty
    assert series(families, "megahour_slurm_jobs") == {}


def test_a_failed_query_leaves_its_families_out():
    runner = runner_2411("draining")
    runner.responses["squeue --json"] = ("", "slurm_load_jobs error: Unable to contact slurm controller", 1)
    got = slurm.collect(SlurmClient(runner=runner), now=100.0)
    assert got.failed and got.counts["queue"] is None and "queue:" in got.problems[0]
    names = {f.name for f in got.families}
    assert "megahour_slurm_jobs" not in names and "megahour_slurm_node_state" in names
    assert series(got.families, "megahour_slurm_exporter_ok") == {(): 0}


def test_slurm_reporting_errors_in_its_json_counts_as_failed():
    runner = runner_2411("draining")
    runner.responses["squeue --json"] = (
        capture("slurm2411-squeue-mixed.json").replace('"errors": [', '"errors": [{"error": "x"}'),
        "",
        0,
    )
    got = slurm.collect(SlurmClient(runner=runner), now=100.0)
    assert got.failed


@pytest.mark.parametrize(
    ("short", "word"),
    [
        ("drain*", "drained"),
        ("drng", "draining"),
        ("mix-", "mixed"),
        ("idle~", "idle"),
        ("down*", "down"),
        ("alloc", "allocated"),
    ],
)
def test_state_words(short, word):
    (node,) = parse_sinfo_nodes(f"n1|{short}|none|Unknown|Unknown\n").items
    assert slurm.state_word(node) == word


def test_a_node_in_two_partitions_counts_once():
    nodes = parse_sinfo_nodes(SINFO).items
    families = slurm.families(nodes, [], [], now=1.0)
    assert sum(series(families, "megahour_slurm_nodes").values()) == len({n.name for n in nodes}) == 10
    assert series(families, "megahour_slurm_node_not_responding")[(("node", "gpu-5"),)] == 1
