"""Safety properties of the sweep plan, over arbitrary clusters."""

from __future__ import annotations

from datetime import datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from megahour.slurm.parse import NodeState, Reservation, RunningJob
from megahour.sweep.rules import Action, SweepPolicy, plan_sweep, reason_code

NOW = datetime(2026, 11, 29, 14, 30, 0)
STATES = ["drain", "drng", "drain*", "drng*", "idle", "mix", "alloc", "down*", "drain~", "mix-", "idle*"]
CODES = [
    "ecc_volatile_uncorrected",
    "remap_pending",
    "remap_failed",
    "disk_full",
    "probe_timeout",
    "nvlink_down",
]

reasons = st.one_of(
    st.none(),
    st.text(max_size=30),
    st.builds(
        lambda code, tail: f"megahour:{code}{tail}", st.sampled_from(CODES), st.sampled_from(["", " gpu=1"])
    ),
    # Lookalikes that must never count as ours.
    st.builds(lambda code: f"Megahour:{code}", st.sampled_from(CODES)),
    st.builds(lambda code: f" megahour:{code}", st.sampled_from(CODES)),
    st.sampled_from(CODES),
)
times = st.one_of(
    st.none(), st.integers(min_value=-60, max_value=3000).map(lambda m: NOW - timedelta(minutes=m))
)
nodes_strategy = st.lists(
    st.builds(
        NodeState,
        name=st.sampled_from([f"gpu-{i}" for i in range(12)]),
        state=st.sampled_from(STATES),
        reason=reasons,
        reason_time=times,
        reason_user=st.sampled_from([None, "root", "slurm"]),
    ),
    max_size=12,
)
verdicts_strategy = st.dictionaries(
    st.sampled_from([f"gpu-{i}" for i in range(12)]),
    st.one_of(st.none(), st.sampled_from(["PASS", "WARN", "FAIL", "UNKNOWN", "pass", "junk"])),
)
history_strategy = st.lists(
    st.builds(
        Action,
        node=st.sampled_from([f"gpu-{i}" for i in range(12)]),
        kind=st.sampled_from(["drain", "resume"]),
        at=st.integers(min_value=0, max_value=3000).map(lambda m: NOW - timedelta(minutes=m)),
    ),
    max_size=20,
)
policies = st.builds(
    SweepPolicy,
    max_resumes_per_run=st.integers(min_value=-1, max_value=5),
    flap_threshold=st.integers(min_value=1, max_value=4),
)
reservations_strategy = st.lists(
    st.builds(
        Reservation,
        name=st.sampled_from(["megahour-a", "megahour-b", "admin-x", "megahourish"]),
        start_time=times,
        end_time=times,
        nodes=st.sampled_from(["", "gpu-1", "gpu-[1-3]", "gpu-[2,7]", "gpu-[x]"]),
        users=st.just(("root",)),
        flags=st.just(frozenset({"MAINT"})),
    ),
    max_size=5,
    unique_by=lambda r: r.name,  # Slurm reservation names are unique
)
jobs_strategy = st.lists(
    st.builds(
        RunningJob, job_id=st.sampled_from(["1", "2_3"]), nodelist=st.sampled_from(["gpu-1", "gpu-[2-4]"])
    ),
    max_size=3,
)


@settings(max_examples=400)
@given(nodes_strategy, verdicts_strategy, history_strategy, policies, reservations_strategy, jobs_strategy)
def test_plan_is_safe(nodes, verdicts, history, policy, reservations, jobs):
    plan = plan_sweep(nodes, verdicts, NOW, history, reservations, jobs, policy)
    by_name = {}
    for node in nodes:
        by_name.setdefault(node.name, node)

    assert len(plan.resumes) <= max(policy.max_resumes_per_run, 0)
    assert len(set(plan.resumes)) == len(plan.resumes)
    for name in plan.resumes:
        node = by_name[name]
        assert node.reason is not None and node.reason.startswith(policy.reason_prefix)
        assert reason_code(node.reason, policy) in policy.transient_reasons - policy.never_resume
        assert node.is_drained and not node.not_responding
        assert str(verdicts[name]).strip().upper() == "PASS"
        assert node.reason_time is not None and NOW - node.reason_time >= policy.dwell
    # Every node is explained exactly once: resumed or skipped with a reason.
    accounted = [*plan.resumes, *(name for name, _ in plan.skipped)]
    assert sorted(accounted) == sorted(by_name)

    busy = {"gpu-1"} if any(j.nodelist == "gpu-1" for j in jobs) else set()
    if any(j.nodelist == "gpu-[2-4]" for j in jobs):
        busy |= {"gpu-2", "gpu-3", "gpu-4"}
    for name in plan.reservation_deletes:
        assert name.startswith(policy.reservation_prefix)
    for res in reservations:
        if res.name in plan.reservation_deletes:
            assert res.nodes != "gpu-[x]"
            members = {"": set(), "gpu-1": {"gpu-1"}, "gpu-[1-3]": {"gpu-1", "gpu-2", "gpu-3"}}.get(
                res.nodes, {"gpu-2", "gpu-7"}
            )
            assert not members & busy


@settings(max_examples=200)
@given(nodes_strategy, verdicts_strategy)
def test_foreign_reasons_are_never_resumed(nodes, verdicts):
    foreign = [
        NodeState(n.name, n.state, f"admin:{n.reason}", n.reason_time, n.reason_user)
        for n in nodes
        if n.reason is not None
    ]
    everyone_passes = dict.fromkeys(verdicts, "PASS")
    assert plan_sweep(foreign, everyone_passes, NOW).resumes == []
