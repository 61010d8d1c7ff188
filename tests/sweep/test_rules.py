from __future__ import annotations

from datetime import UTC, datetime, timedelta
from enum import Enum

import pytest

from megahour.slurm.parse import (
    NodeState,
    Reservation,
    RunningJob,
    parse_reservations,
    parse_sinfo_nodes,
    parse_squeue_running,
)
from megahour.sweep.rules import (
    ALERT_DRAINED_IDLE,
    ALERT_FLAPPING,
    Action,
    SweepPolicy,
    format_duration,
    plan_alerts,
    plan_reservation_deletes,
    plan_resumes,
    plan_sweep,
    prune_history,
    reason_code,
    resume_candidates,
)
from tests.slurm.fixtures import RESERVATIONS, SINFO, SQUEUE

NOW = datetime(2026, 11, 29, 14, 30, 0)
POLICY = SweepPolicy()


def drained(name: str, reason: str | None, minutes_ago: float | None, state: str = "drain") -> NodeState:
    when = None if minutes_ago is None else NOW - timedelta(minutes=minutes_ago)
    return NodeState(name, state, reason, when, "root")


def all_pass(nodes) -> dict[str, str]:
    return {n.name: "PASS" for n in nodes}


def skip_reason(skipped, node):
    reasons = [why for name, why in skipped if name == node]
    assert len(reasons) == 1, (node, skipped)
    return reasons[0]


# resumes -----------------------------------------------------------------------


def test_fixture_cluster_plan():
    nodes = parse_sinfo_nodes(SINFO).items
    plan = plan_sweep(
        nodes,
        all_pass(nodes),
        NOW,
        reservations=parse_reservations(RESERVATIONS).items,
        running_jobs=parse_squeue_running(SQUEUE).items,
    )
    assert plan.resumes == ["gpu-1", "gpu-2"]  # gpu-2 is draining (drng): resumable too
    assert skip_reason(plan.skipped, "gpu-3") == "reason not ours"
    assert skip_reason(plan.skipped, "gpu-5") == "not responding to slurmctld"
    assert skip_reason(plan.skipped, "gpu-6") == "never resumed: remap_failed"
    assert skip_reason(plan.skipped, "gpu-8") == "not drained (down*)"
    assert skip_reason(plan.skipped, "ctl") == "not drained (idle)"
    # Every node is accounted for exactly once.
    assert sorted([*plan.resumes, *(n for n, _ in plan.skipped)]) == sorted(n.name for n in nodes)


@pytest.mark.parametrize(
    "reason",
    [
        "ecc_volatile_uncorrected",
        "Kill task failed",
        "Megahour:ecc_volatile_uncorrected",
        " megahour:ecc_volatile_uncorrected",
        "admin: see megahour:ecc_volatile_uncorrected",
        None,
    ],
)
def test_foreign_reasons_are_never_resumed(reason):
    node = drained("gpu-1", reason, 120)
    resumes, skipped = plan_resumes([node], {"gpu-1": "PASS"}, NOW)
    assert resumes == []
    assert skip_reason(skipped, "gpu-1") == "reason not ours"


def test_never_resume_wins_even_if_listed_as_transient():
    policy = SweepPolicy(transient_reasons=frozenset({"remap_failed", "remap_pending"}))
    resumes, skipped = plan_resumes(
        [drained("gpu-1", "megahour:remap_failed gpu=2", 120)], {"gpu-1": "PASS"}, NOW, (), policy
    )
    assert resumes == []
    assert skip_reason(skipped, "gpu-1") == "never resumed: remap_failed"


def test_codes_not_listed_as_transient_are_kept():
    resumes, skipped = plan_resumes([drained("gpu-1", "megahour:nvlink_down", 120)], {"gpu-1": "PASS"}, NOW)
    assert resumes == []
    assert skip_reason(skipped, "gpu-1") == "not a transient reason: nvlink_down"


def test_our_reason_without_a_code_is_kept():
    _, skipped = plan_resumes([drained("gpu-1", "megahour:", 120)], {"gpu-1": "PASS"}, NOW)
    assert skip_reason(skipped, "gpu-1") == "our reason has no code"


@pytest.mark.parametrize(
    ("reason", "code"),
    [
        ("megahour:remap_pending", "remap_pending"),
        ("megahour:remap_pending gpu=0", "remap_pending"),
        ("megahour:remap_pending;gpu=0", "remap_pending"),
        ("megahour:disk_full: /var 99%", "disk_full"),
        ("megahour:", ""),
        ("other", None),
        (None, None),
    ],
)
def test_reason_code(reason, code):
    assert reason_code(reason, POLICY) == code


def test_dwell_must_pass_since_the_drain():
    resumes, skipped = plan_resumes([drained("gpu-1", "megahour:xid_reset_gpu", 3)], {"gpu-1": "PASS"}, NOW)
    assert resumes == []
    assert skip_reason(skipped, "gpu-1") == "dwell not reached (3m of 10m)"
    resumes, _ = plan_resumes([drained("gpu-1", "megahour:xid_reset_gpu", 10)], {"gpu-1": "PASS"}, NOW)
    assert resumes == ["gpu-1"]


def test_unknown_drain_time_is_not_resumed():
    _, skipped = plan_resumes([drained("gpu-1", "megahour:disk_full", None)], {"gpu-1": "PASS"}, NOW)
    assert skip_reason(skipped, "gpu-1") == "unknown drain time"


def test_drain_time_in_the_future_is_not_resumed():
    _, skipped = plan_resumes([drained("gpu-1", "megahour:disk_full", -5)], {"gpu-1": "PASS"}, NOW)
    assert skip_reason(skipped, "gpu-1").startswith("dwell not reached (-5m")


@pytest.mark.parametrize(
    ("verdict", "why"),
    [
        ("WARN", "fresh check did not pass (WARN)"),
        ("FAIL", "fresh check did not pass (FAIL)"),
        ("UNKNOWN", "fresh check did not pass (UNKNOWN)"),
        ("banana", "fresh check did not pass (UNKNOWN)"),
        (None, "no fresh check"),
    ],
)
def test_fresh_verdict_must_be_pass(verdict, why):
    node = drained("gpu-1", "megahour:leftover_gpu_process pid=4242", 60)
    resumes, skipped = plan_resumes([node], {"gpu-1": verdict}, NOW)
    assert resumes == []
    assert skip_reason(skipped, "gpu-1") == why


def test_missing_verdict_is_no_fresh_check():
    _, skipped = plan_resumes([drained("gpu-1", "megahour:disk_full", 60)], {}, NOW)
    assert skip_reason(skipped, "gpu-1") == "no fresh check"


def test_lower_case_pass_counts():
    resumes, _ = plan_resumes([drained("gpu-1", "megahour:disk_full", 60)], {"gpu-1": " pass "}, NOW)
    assert resumes == ["gpu-1"]


def test_enum_verdicts_count():
    class Status(Enum):
        PASS = "PASS"
        WARN = "WARN"

    node = drained("gpu-1", "megahour:disk_full", 60)
    assert plan_resumes([node], {"gpu-1": Status.PASS}, NOW)[0] == ["gpu-1"]
    assert plan_resumes([node], {"gpu-1": Status.WARN}, NOW)[0] == []


def test_rate_limit_resumes_oldest_drain_first():
    nodes = [
        drained("gpu-4", "megahour:disk_full", 20),
        drained("gpu-2", "megahour:disk_full", 90),
        drained("gpu-9", "megahour:probe_timeout", 300),
        drained("gpu-1", "megahour:remap_pending", 45),
        drained("gpu-3", "megahour:remap_pending", 90),  # same time as gpu-2: name breaks the tie
    ]
    resumes, skipped = plan_resumes(nodes, all_pass(nodes), NOW)
    assert resumes == ["gpu-9", "gpu-2"]
    for name in ("gpu-3", "gpu-1", "gpu-4"):
        assert skip_reason(skipped, name) == "rate limit reached"
    assert [n.name for n in resume_candidates(nodes, NOW)] == ["gpu-9", "gpu-2", "gpu-3", "gpu-1", "gpu-4"]


def test_failed_checks_do_not_use_up_the_rate_limit():
    nodes = [drained(f"gpu-{i}", "megahour:disk_full", 100 - i) for i in range(1, 5)]
    verdicts = {"gpu-1": "FAIL", "gpu-2": "PASS", "gpu-3": "WARN", "gpu-4": "PASS"}
    resumes, skipped = plan_resumes(nodes, verdicts, NOW)
    assert resumes == ["gpu-2", "gpu-4"]
    assert skip_reason(skipped, "gpu-1") == "fresh check did not pass (FAIL)"


def test_zero_rate_limit_resumes_nothing():
    node = drained("gpu-1", "megahour:disk_full", 60)
    resumes, skipped = plan_resumes([node], {"gpu-1": "PASS"}, NOW, (), SweepPolicy(max_resumes_per_run=0))
    assert resumes == []
    assert skip_reason(skipped, "gpu-1") == "rate limit reached"


def test_aware_now_is_compared_in_local_time():
    aware_now = NOW.astimezone(UTC)
    resumes, _ = plan_resumes([drained("gpu-1", "megahour:disk_full", 60)], {"gpu-1": "PASS"}, aware_now)
    assert resumes == ["gpu-1"]


# reservations --------------------------------------------------------------------


def _res(name, nodes, start_minutes_ago, end_minutes_ahead):
    return Reservation(
        name=name,
        start_time=NOW - timedelta(minutes=start_minutes_ago),
        end_time=NOW + timedelta(minutes=end_minutes_ahead),
        nodes=nodes,
        users=("root",),
        flags=frozenset({"MAINT"}),
    )


def test_fixture_reservations():
    deletes, kept = plan_reservation_deletes(
        parse_reservations(RESERVATIONS).items, parse_squeue_running(SQUEUE).items, NOW
    )
    assert deletes == ["megahour-maint-1"]  # ours, started 30m ago, no job on gpu-1
    assert dict(kept) == {
        "megahour-maint-2": "jobs running on gpu-2 (job 4101), gpu-7 (job 4101)",
        "team-demo": "not ours",
    }


def test_ours_without_jobs_is_deleted_and_ours_with_jobs_kept():
    reservations = [_res("megahour-a", "gpu-[1-2]", 60, 60), _res("megahour-b", "gpu-[3-4]", 60, 60)]
    jobs = [RunningJob("77", "gpu-[4-5]")]
    deletes, kept = plan_reservation_deletes(reservations, jobs, NOW)
    assert deletes == ["megahour-a"]
    assert dict(kept) == {"megahour-b": "jobs running on gpu-4 (job 77)"}


def test_foreign_reservations_are_never_deleted():
    reservations = [_res("maint-by-admin", "gpu-1", 600, -60), _res("megahourx", "gpu-1", 600, 60)]
    deletes, kept = plan_reservation_deletes(reservations, [], NOW)
    assert deletes == []
    assert dict(kept) == {"maint-by-admin": "not ours", "megahourx": "not ours"}


def test_future_and_fresh_reservations_are_kept_expired_ones_deleted():
    reservations = [
        _res("megahour-future", "gpu-1", -60, 120),
        _res("megahour-fresh", "gpu-2", 5, 60),
        _res("megahour-expired", "gpu-3", 3, -1),
    ]
    deletes, kept = plan_reservation_deletes(reservations, [], NOW)
    assert deletes == ["megahour-expired"]
    assert dict(kept) == {
        "megahour-future": "not started yet",
        "megahour-fresh": "started 5m ago, grace 30m",
    }


def test_incomplete_job_list_blocks_every_delete():
    reservations = [_res("megahour-a", "gpu-1", 60, 60)]
    deletes, kept = plan_reservation_deletes(reservations, [], NOW, jobs_complete=False)
    assert deletes == [] and dict(kept) == {"megahour-a": "job list incomplete"}
    deletes, kept = plan_reservation_deletes(reservations, [RunningJob("9", "gpu-[3-")], NOW)
    assert deletes == [] and dict(kept) == {"megahour-a": "job list incomplete"}


def test_unreadable_reservation_nodes_are_kept():
    deletes, kept = plan_reservation_deletes([_res("megahour-a", "gpu-[9-1]", 60, 60)], [], NOW)
    assert deletes == [] and "cannot read node list" in dict(kept)["megahour-a"]


# alerts --------------------------------------------------------------------------


def test_drained_idle_alert_for_any_reason():
    nodes = parse_sinfo_nodes(SINFO).items
    alerts = plan_alerts(nodes, NOW)
    idle = {a.node: a for a in alerts if a.name == ALERT_DRAINED_IDLE}
    # gpu-3 (foreign, 11h), gpu-5 (2h30, not responding), gpu-6 (3h30); gpu-1 only 47m; gpu-2 is draining.
    assert sorted(idle) == ["gpu-3", "gpu-5", "gpu-6"]
    assert idle["gpu-3"].since == datetime(2026, 11, 29, 3, 10, 11)
    assert "by slurm" in idle["gpu-3"].detail and "Kill task failed" in idle["gpu-3"].detail


def test_drained_idle_alert_threshold_and_resumed_nodes():
    nodes = [
        drained("a", "megahour:disk_full", 61),
        drained("b", "x", 59),
        drained("c", "megahour:disk_full", 120),
    ]
    alerts = plan_alerts(nodes, NOW, resumed=["c"])
    assert [(a.name, a.node) for a in alerts] == [(ALERT_DRAINED_IDLE, "a")]


def test_drained_idle_with_unknown_time_still_alerts():
    (alert,) = plan_alerts([drained("a", "who knows", None)], NOW)
    assert alert.name == ALERT_DRAINED_IDLE and alert.since is None


def test_flapping_node_alerts_and_is_left_drained():
    history = [Action("gpu-1", "resume", NOW - timedelta(hours=h)) for h in (1, 5, 20)]
    history.append(Action("gpu-1", "drain", NOW - timedelta(hours=2)))
    nodes = [drained("gpu-1", "megahour:xid_reset_gpu", 30)]
    plan = plan_sweep(nodes, all_pass(nodes), NOW, history)
    assert plan.resumes == []
    assert skip_reason(plan.skipped, "gpu-1") == "flapping: 3 resumes in 1d; left for a human"
    (alert,) = plan.alerts
    assert alert.name == ALERT_FLAPPING and alert.node == "gpu-1"
    assert alert.since == NOW - timedelta(hours=20)


def test_the_resume_that_reaches_the_threshold_happens_and_alerts():
    history = [Action("gpu-1", "resume", NOW - timedelta(hours=h)) for h in (2, 6)]
    nodes = [drained("gpu-1", "megahour:xid_reset_gpu", 30)]
    plan = plan_sweep(nodes, all_pass(nodes), NOW, history)
    assert plan.resumes == ["gpu-1"]
    assert [(a.name, a.node) for a in plan.alerts] == [(ALERT_FLAPPING, "gpu-1")]


def test_resumes_outside_the_window_do_not_count():
    history = [Action("gpu-1", "resume", NOW - timedelta(hours=h)) for h in (25, 30, 48, 2)]
    nodes = [drained("gpu-1", "megahour:xid_reset_gpu", 30)]
    plan = plan_sweep(nodes, all_pass(nodes), NOW, history)
    assert plan.resumes == ["gpu-1"] and plan.alerts == []


def test_prune_history_keeps_the_flap_window():
    history = [
        Action("gpu-1", "resume", NOW - timedelta(hours=30)),
        Action("gpu-2", "resume", NOW - timedelta(hours=2)),
        Action("gpu-1", "drain", NOW - timedelta(hours=3)),
    ]
    assert prune_history(history, NOW) == [history[2], history[1]]


@pytest.mark.parametrize(
    ("delta", "text"),
    [
        (timedelta(seconds=45), "45s"),
        (timedelta(minutes=3, seconds=5), "3m"),
        (timedelta(hours=1, minutes=5), "1h05m"),
        (timedelta(hours=2), "2h"),
        (timedelta(days=2, hours=3), "2d3h"),
        (timedelta(minutes=-5), "-5m"),
    ],
)
def test_format_duration(delta, text):
    assert format_duration(delta) == text
