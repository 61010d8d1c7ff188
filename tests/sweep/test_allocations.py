"""The stale GPU allocation rule (sweep/allocations.py), on real captures and small hand-made clusters."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from megahour.slurm.parse import JobGpus, NodeGres, parse_sinfo_gres_json, parse_squeue_gpus_json
from megahour.sweep.allocations import (
    ALERT_STALE_GPU_ALLOCATION,
    Sighting,
    find_stale,
    forget,
    plan_stale_allocations,
    prune_reconciles,
    stale_alerts,
    still_stale,
)
from megahour.sweep.cli import STALE_ALLOCATION_CHOICES
from megahour.sweep.rules import STALE_ALLOCATION_MODES, SweepPolicy
from tests.slurm.fixtures import capture

NOW = datetime(2026, 11, 29, 14, 30, 0)
MINUTE = timedelta(minutes=1)


def node(
    name: str = "gpu-1",
    state: str = "idle",
    used: int = 0,
    indices: frozenset[int] | None = None,
    alloc_tres: int | None = None,
    gpus: int = 8,
) -> NodeGres:
    return NodeGres(name, state, frozenset(), gpus, used, indices, alloc_tres)


def job(job_id: str, gpus: int | None, where: str = "gpu-1", indices=None, state="RUNNING") -> JobGpus:
    return JobGpus(job_id, state, where, gpus, indices)


def seen(name: str = "gpu-1", first_ago: timedelta = 2 * MINUTE, last_ago: timedelta = MINUTE) -> Sighting:
    return Sighting(name, NOW - first_ago, NOW - last_ago)


def captured(sinfo: str, squeue: str):
    nodes, jobs = parse_sinfo_gres_json(capture(sinfo)), parse_squeue_gpus_json(capture(squeue))
    assert nodes.complete and jobs.complete
    return nodes.items, jobs.items


# The rule ------------------------------------------------------------------------------------------


def test_idle_node_whose_gpus_no_job_holds_is_reconciled_once_confirmed():
    # Real captures: gpu-1 idle with 3 GPUs allocated (IDX 0-2), and a job list of finished jobs only.
    nodes, jobs = captured("sinfo-suspended.json", "squeue-idle.json")
    plan = plan_stale_allocations(nodes, jobs, NOW, sightings=[seen()])
    (stale,) = plan.stale
    assert stale.confirmed and stale.node == "gpu-1" and stale.state == "idle"
    assert (stale.allocated, stale.held, stale.jobs, stale.stale_indices) == (3, 0, (), {0, 1, 2})
    assert stale.describe() == "idle node: 3 of 4 GPUs allocated, no job holds any; unheld GPU indices 0-2"
    assert plan.reconcile and plan.why == "stale GPU allocations on gpu-1"
    assert plan.sightings == [Sighting("gpu-1", NOW - 2 * MINUTE, NOW)]


def test_the_same_idle_node_with_its_suspended_jobs_listed_is_not_stale():
    nodes, jobs = captured("sinfo-suspended.json", "squeue-suspended.json")
    plan = plan_stale_allocations(nodes, jobs, NOW, sightings=[seen()])
    assert plan.checked and plan.stale == [] and not plan.reconcile and plan.sightings == []


@pytest.mark.parametrize(
    ("sinfo", "squeue"),
    [
        ("sinfo-mixed.json", "squeue-mixed.json"),
        ("sinfo-completing.json", "squeue-completing.json"),
        ("sinfo-idle.json", "squeue-idle.json"),
    ],
)
def test_nodes_whose_jobs_account_for_every_gpu_are_left_alone(sinfo, squeue):
    nodes, jobs = captured(sinfo, squeue)
    plan = plan_stale_allocations(nodes, jobs, NOW, sightings=[seen()])
    assert plan.checked and plan.stale == [] and not plan.reconcile


def test_mixed_node_with_more_allocated_than_its_jobs_hold():
    nodes = [node(state="mixed", used=6, indices=frozenset(range(6)))]
    jobs = [job("10", 2, indices=frozenset({0, 1})), job("9", 2, indices=frozenset({2, 3})), job("11", 0)]
    (stale,) = plan_stale_allocations(nodes, jobs, NOW, sightings=[seen()]).stale
    assert (stale.allocated, stale.held, stale.jobs, stale.stale_indices) == (6, 4, ("9", "10", "11"), {4, 5})
    assert stale.describe() == (
        "mixed node: 6 of 8 GPUs allocated, its jobs (9, 10, 11) hold 4; unheld GPU indices 4-5"
    )


def test_equal_counts_on_different_gpus_are_stale_too():
    nodes = [node(state="mixed", used=2, indices=frozenset({0, 1}))]
    (stale,) = plan_stale_allocations(nodes, [job("7", 2, indices=frozenset({2, 3}))], NOW).stale
    assert stale.allocated == stale.held == 2 and stale.stale_indices == {0, 1}


def test_the_allocation_counter_counts_even_without_indices():
    # AllocTRES gres/gpu (the counter) says 2 while GresUsed's bitmap says 0: the scheduler refuses both.
    (stale,) = plan_stale_allocations([node(used=0, indices=frozenset(), alloc_tres=2)], [], NOW).stale
    assert stale.allocated == 2 and stale.stale_indices is None


def test_gpus_of_other_nodes_do_not_count():
    nodes = [node("gpu-1", used=2, indices=frozenset({0, 1})), node("gpu-2", "mixed", 2, frozenset({0, 1}))]
    jobs = [job("7", 2, "gpu-2", frozenset({0, 1}))]
    assert [s.node for s in plan_stale_allocations(nodes, jobs, NOW).stale] == ["gpu-1"]


def test_a_partial_job_list_judges_nothing_and_forgets_nothing():
    nodes, jobs = captured("sinfo-suspended.json", "squeue-idle.json")
    before = [seen()]
    plan = plan_stale_allocations(nodes, jobs, NOW, sightings=before, jobs_complete=False)
    assert not plan.checked and plan.why == "job list incomplete"
    assert plan.stale == [] and not plan.reconcile and plan.sightings == before
    plan = plan_stale_allocations(nodes, jobs, NOW, sightings=before, nodes_complete=False)
    assert not plan.checked and plan.why == "node list incomplete" and plan.sightings == before


def test_a_node_with_a_job_of_unknown_gpus_is_not_judged():
    nodes = [node(used=4, indices=None)]
    plan = plan_stale_allocations(nodes, [job("7", None)], NOW, sightings=[seen()])
    assert plan.stale == [] and plan.unjudged == [("gpu-1", "GPUs of job 7 on it are unknown")]
    assert plan.sightings == [seen()]  # unknown is not "no longer stale"


def test_first_sighting_waits():
    nodes, jobs = captured("sinfo-suspended.json", "squeue-idle.json")
    plan = plan_stale_allocations(nodes, jobs, NOW)
    (stale,) = plan.stale
    assert not stale.confirmed and stale.first_seen == NOW
    assert not plan.reconcile and plan.why.startswith("waiting for a second sighting at least 2m")
    assert plan.sightings == [Sighting("gpu-1", NOW, NOW)]
    assert stale_alerts(plan.stale) == []


def test_second_sweep_before_the_grace_still_waits_then_confirms():
    nodes = [node(used=1, indices=frozenset({0}))]
    plan = plan_stale_allocations(nodes, [], NOW, sightings=[seen(first_ago=MINUTE, last_ago=MINUTE)])
    assert not plan.stale[0].confirmed and plan.sightings == [Sighting("gpu-1", NOW - MINUTE, NOW)]
    later = NOW + MINUTE
    plan = plan_stale_allocations(nodes, [], later, sightings=plan.sightings)
    assert plan.stale[0].confirmed and plan.reconcile


def test_the_grace_alone_is_not_enough_a_previous_sweep_must_have_seen_it():
    nodes = [node(used=1, indices=frozenset({0}))]
    # Seen long ago, then not for longer than the max gap (the timer stopped): start over.
    plan = plan_stale_allocations(
        nodes, [], NOW, sightings=[seen(first_ago=3 * 60 * MINUTE, last_ago=30 * MINUTE)]
    )
    assert not plan.stale[0].confirmed and plan.stale[0].first_seen == NOW
    # A sighting stamped now (this very run, or a clock step back) is no previous sweep either.
    plan = plan_stale_allocations(
        nodes, [], NOW, sightings=[seen(first_ago=5 * MINUTE, last_ago=timedelta(0))]
    )
    assert not plan.stale[0].confirmed
    # With no grace, the second consecutive sweep confirms.
    policy = SweepPolicy(stale_allocation_grace=timedelta(0))
    plan = plan_stale_allocations(nodes, [], NOW, policy, sightings=[seen(first_ago=MINUTE, last_ago=MINUTE)])
    assert plan.stale[0].confirmed


def test_a_node_no_longer_stale_is_forgotten():
    plan = plan_stale_allocations([node(used=0, indices=frozenset())], [], NOW, sightings=[seen()])
    assert plan.stale == [] and plan.sightings == []


def test_alert_mode_alerts_without_reconciling():
    nodes = [node(used=1, indices=frozenset({0}))]
    plan = plan_stale_allocations(nodes, [], NOW, SweepPolicy(stale_allocations="alert"), sightings=[seen()])
    assert not plan.reconcile and "reconcile off (--stale-allocations alert)" in plan.why
    (alert,) = stale_alerts(plan.stale)
    assert alert.name == ALERT_STALE_GPU_ALLOCATION and alert.node == "gpu-1"
    assert alert.since == NOW - 2 * MINUTE


def test_off_mode_checks_nothing():
    plan = plan_stale_allocations([node(used=1)], [], NOW, SweepPolicy(stale_allocations="off"))
    assert not plan.checked and plan.stale == [] and plan.sightings == []


def test_cooldown_after_a_reconcile():
    nodes = [node(used=1, indices=frozenset({0}))]
    plan = plan_stale_allocations(nodes, [], NOW, sightings=[seen()], reconciles=[NOW - 30 * MINUTE])
    assert not plan.reconcile and plan.why.startswith("last scontrol reconfigure 30m ago, cooldown 1h")
    assert stale_alerts(plan.stale)  # the alert stays for a human
    plan = plan_stale_allocations(nodes, [], NOW, sightings=[seen()], reconciles=[NOW - 61 * MINUTE])
    assert plan.reconcile


def test_alerts_skip_first_sightings_and_cleared_nodes():
    nodes = [node("gpu-1", used=1, indices=frozenset({0})), node("gpu-2", used=1, indices=frozenset({0}))]
    plan = plan_stale_allocations(nodes, [], NOW, sightings=[seen("gpu-1"), seen("gpu-2")])
    assert [a.node for a in stale_alerts(plan.stale)] == ["gpu-1", "gpu-2"]
    assert [a.node for a in stale_alerts(plan.stale, cleared=["gpu-1"])] == ["gpu-2"]
    assert forget(plan.sightings, ["gpu-1"]) == [Sighting("gpu-2", NOW - 2 * MINUTE, NOW)]


def test_still_stale_rechecks_only_confirmed_nodes():
    nodes = [node("gpu-1", used=1, indices=frozenset({0})), node("gpu-2", used=1, indices=frozenset({0}))]
    plan = plan_stale_allocations(nodes, [], NOW, sightings=[seen("gpu-1")])
    assert still_stale(plan, nodes, []) == ["gpu-1"]
    # A job took the GPU in between (it now holds it): not stale any more.
    assert still_stale(plan, nodes, [job("12", 1, "gpu-1", frozenset({0}))]) == []


def test_prune_reconciles_keeps_the_cooldown_window():
    kept = prune_reconciles([NOW - 2 * 60 * MINUTE, NOW - 10 * MINUTE], NOW, SweepPolicy())
    assert kept == [NOW - 10 * MINUTE]


def test_cli_choices_are_the_policy_modes():
    assert STALE_ALLOCATION_CHOICES == STALE_ALLOCATION_MODES


# Safety over arbitrary clusters ----------------------------------------------------------------------

gpu_sets = st.frozensets(st.integers(min_value=0, max_value=7), max_size=8)


@st.composite
def clusters(draw):
    names = [f"gpu-{i}" for i in range(1, draw(st.integers(min_value=1, max_value=4)) + 1)]
    jobs = []
    for i, name in enumerate(draw(st.lists(st.sampled_from(names), max_size=8))):
        indices = draw(gpu_sets)
        jobs.append(
            job(str(100 + i), len(indices), name, indices, draw(st.sampled_from(["RUNNING", "SUSPENDED"])))
        )
    nodes = []
    for name in names:
        held = frozenset().union(*(j.indices or frozenset() for j in jobs if j.node == name))
        extra = draw(gpu_sets)
        nodes.append(
            node(name, draw(st.sampled_from(["idle", "mixed", "allocated"])), len(held | extra), held | extra)
        )
    return nodes, jobs


@settings(max_examples=200, deadline=None)
@given(clusters(), st.booleans())
def test_a_node_whose_jobs_hold_every_allocated_gpu_is_never_stale(cluster, complete):
    nodes, jobs = cluster
    found, _ = find_stale(nodes, jobs)
    for stale_node, held, _, unheld in found:
        assert stale_node.gpus_allocated > held or unheld
        assert unheld  # allocated indices are a superset of held ones here, so only unheld ones count
    plan = plan_stale_allocations(
        nodes, jobs, NOW, sightings=[seen(n.name) for n in nodes], jobs_complete=complete
    )
    if not complete:
        assert plan.stale == [] and not plan.reconcile
    for entry in plan.stale:
        held = {i for j in jobs if j.node == entry.node for i in (j.indices or ())}
        assert entry.stale_indices and not entry.stale_indices & held
