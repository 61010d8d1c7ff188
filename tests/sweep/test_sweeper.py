from __future__ import annotations

import json
import os
import subprocess
from datetime import datetime, timedelta

import pytest

from megahour.slurm.client import SlurmClient
from megahour.sweep.rules import ALERT_DRAINED_IDLE, ALERT_FLAPPING, Action, SweepPolicy
from megahour.sweep.sweeper import load_history, render_history, run_sweep
from tests.slurm.fixtures import SINFO, SQUEUE, FakeRunner, completed, healthy_runner

NOW = datetime(2026, 11, 29, 14, 30, 0)


@pytest.fixture
def paths(tmp_path):
    state = tmp_path / "state"
    textfiles = tmp_path / "textfile"
    return state / "sweep-history.json", textfiles / "megahour_sweep.prom"


def passing(node: str) -> str:
    return "PASS"


def updates(runner: FakeRunner) -> list[list[str]]:
    return runner.commands("scontrol update") + runner.commands("scontrol delete")


def metric(path, name: str) -> str:
    lines = [line for line in path.read_text().splitlines() if line.startswith(name + " ")]
    assert len(lines) == 1, lines
    return lines[0].split(" ", 1)[1]


def no_temp_files(*dirs) -> bool:
    return all(not p.name.startswith(".") and not p.name.endswith(".tmp") for d in dirs for p in d.iterdir())


def test_sweep_resumes_deletes_and_records(paths):
    history_path, metrics_path = paths
    runner = healthy_runner()
    report = run_sweep(SlurmClient(runner=runner), passing, history_path, metrics_path, now=NOW)
    assert report.ok and report.error is None
    assert report.resumed == ["gpu-1", "gpu-2"]
    assert report.reservations_deleted == ["megahour-maint-1"]
    assert updates(runner) == [
        ["scontrol", "update", "NodeName=gpu-1", "State=RESUME"],
        ["scontrol", "update", "NodeName=gpu-2", "State=RESUME"],
        ["scontrol", "delete", "ReservationName=megahour-maint-1"],
    ]
    assert load_history(history_path) == [
        Action("gpu-1", "resume", NOW),
        Action("gpu-2", "resume", NOW),
    ]
    assert metric(metrics_path, "megahour_sweep_query_ok") == "1"
    assert metric(metrics_path, "megahour_sweep_resumes_total") == "2"
    assert {a.node for a in report.alerts if a.name == ALERT_DRAINED_IDLE} == {"gpu-3", "gpu-5", "gpu-6"}
    assert no_temp_files(history_path.parent, metrics_path.parent)
    assert any(line.startswith("skip gpu-3: reason not ours") for line in report.describe())
    json.dumps(report.to_dict())


def raise_timeout(argv):
    raise subprocess.TimeoutExpired(argv, 10)


def raise_missing(argv):
    raise FileNotFoundError(2, "No such file or directory", argv[0])


@pytest.mark.parametrize(
    "broken",
    [
        {"sinfo": ("", "slurm_load_partitions: Unable to contact slurm controller (connect failure)\n", 1)},
        {"squeue": ("", "squeue: error: Invalid user\n", 1)},
        {"scontrol show reservation": raise_timeout},
        {"sinfo": raise_missing},
    ],
)
def test_any_query_failure_fails_closed(paths, broken):
    history_path, metrics_path = paths
    runner = healthy_runner()
    runner.responses.update(broken)
    asked = []
    report = run_sweep(
        SlurmClient(runner=runner), lambda n: asked.append(n) or "PASS", history_path, metrics_path, now=NOW
    )
    assert not report.ok and report.plan is None
    assert report.error.startswith("Slurm query failed")
    assert updates(runner) == []
    assert asked == []
    assert not history_path.exists()
    assert metric(metrics_path, "megahour_sweep_query_ok") == "0"
    assert "megahour_node_drained{" not in metrics_path.read_text()
    assert no_temp_files(metrics_path.parent)


def test_failure_of_the_recheck_before_acting_fails_closed(paths):
    history_path, metrics_path = paths
    calls = {"n": 0}

    def sinfo_once(argv):
        calls["n"] += 1
        if calls["n"] == 1:
            return completed(argv, SINFO)
        return completed(argv, "", "slurm_load_node: Socket timed out on send/recv operation\n", 1)

    runner = healthy_runner()
    runner.responses["sinfo"] = sinfo_once
    report = run_sweep(SlurmClient(runner=runner), passing, history_path, metrics_path, now=NOW)
    assert not report.ok and "before acting" in report.error
    assert updates(runner) == []
    assert load_history(history_path) == []
    assert metric(metrics_path, "megahour_sweep_query_ok") == "0"


def test_node_changed_since_planning_is_left_alone(paths):
    history_path, metrics_path = paths
    redrained = SINFO.replace(
        "gpu-1|drain|megahour:ecc_volatile_uncorrected gpu=3 count=2|2026-11-29T13:42:29|root",
        "gpu-1|drain|admin: replacing GPU 3|2026-11-29T14:29:00|alice",
    )
    answers = iter([SINFO, redrained])
    runner = healthy_runner()
    runner.responses["sinfo"] = lambda argv: completed(argv, next(answers))
    report = run_sweep(SlurmClient(runner=runner), passing, history_path, metrics_path, now=NOW)
    assert report.resumed == ["gpu-2"]
    assert ("gpu-1", "state changed since planning; left alone") in report.failures
    assert ["scontrol", "update", "NodeName=gpu-1", "State=RESUME"] not in runner.calls


def test_reservation_that_got_a_job_is_left_alone(paths):
    history_path, metrics_path = paths
    answers = iter([SQUEUE, SQUEUE + "4200|gpu-1|gpu-1\n"])
    runner = healthy_runner()
    runner.responses["squeue"] = lambda argv: completed(argv, next(answers))
    report = run_sweep(SlurmClient(runner=runner), passing, history_path, metrics_path, now=NOW)
    assert report.reservations_deleted == []
    assert runner.commands("scontrol delete") == []


def test_dry_run_changes_nothing(paths):
    history_path, metrics_path = paths
    runner = healthy_runner()
    report = run_sweep(SlurmClient(runner=runner), passing, history_path, metrics_path, now=NOW, dry_run=True)
    assert report.ok and report.plan.resumes == ["gpu-1", "gpu-2"]
    assert report.resumed == []
    assert updates(runner) == []
    assert not history_path.exists() and not metrics_path.exists()
    assert "dry run: would resume gpu-1" in report.describe()


def test_verdicts_are_asked_only_for_candidates_oldest_first_until_the_limit(paths):
    history_path, metrics_path = paths
    asked = []

    def verdict(node):
        asked.append(node)
        return {"gpu-1": "FAIL"}.get(node, "PASS")

    runner = healthy_runner()
    report = run_sweep(
        SlurmClient(runner=runner),
        verdict,
        history_path,
        metrics_path,
        SweepPolicy(max_resumes_per_run=1),
        NOW,
    )
    assert asked == ["gpu-1", "gpu-2"]  # gpu-3, gpu-5, gpu-6 were never candidates
    assert report.resumed == ["gpu-2"]
    assert ("gpu-1", "fresh check did not pass (FAIL)") in report.plan.skipped


def test_a_crashing_health_check_is_no_fresh_check(paths):
    history_path, metrics_path = paths

    def broken(node):
        raise RuntimeError("ssh: connect to host gpu-1 port 22: Connection refused")

    runner = healthy_runner()
    report = run_sweep(SlurmClient(runner=runner), broken, history_path, metrics_path, now=NOW)
    assert report.resumed == []
    assert runner.commands("scontrol update") == []
    assert ("gpu-1", "no fresh check") in report.plan.skipped
    assert any("Connection refused" in w for w in report.warnings)


def test_failed_resume_is_not_recorded_and_keeps_its_alert(paths):
    history_path, metrics_path = paths
    old = SINFO.replace("2026-11-29T13:42:29", "2026-11-29T10:00:00")
    runner = healthy_runner(sinfo=old)
    runner.responses["scontrol update NodeName=gpu-1"] = ("", "slurm_update error: Invalid node state\n", 1)
    report = run_sweep(SlurmClient(runner=runner), passing, history_path, metrics_path, now=NOW)
    assert report.resumed == ["gpu-2"]
    assert report.failures[0][0] == "gpu-1" and "Invalid node state" in report.failures[0][1]
    assert [a.node for a in load_history(history_path)] == ["gpu-2"]
    assert "gpu-1" in {a.node for a in report.alerts if a.name == ALERT_DRAINED_IDLE}
    assert metric(metrics_path, "megahour_sweep_resumes_total") == "1"


def test_flapping_across_runs_via_the_history_file(paths):
    history_path, metrics_path = paths
    history_path.parent.mkdir(parents=True)
    past = [Action("gpu-1", "resume", NOW - timedelta(hours=h)) for h in (3, 8, 12)]
    history_path.write_text(render_history([*past, Action("gpu-9", "resume", NOW - timedelta(days=3))]))
    runner = healthy_runner()
    report = run_sweep(SlurmClient(runner=runner), passing, history_path, metrics_path, now=NOW)
    assert "gpu-1" not in report.resumed
    assert ("gpu-1", ALERT_FLAPPING) in {(a.node, a.name) for a in report.alerts}
    assert (
        'megahour_alert_active{alertname="MegahourNodeFlapping",node="gpu-1"} 1' in metrics_path.read_text()
    )
    # The 3-day-old entry fell out of the flap window and was pruned.
    assert {a.node for a in load_history(history_path)} == {"gpu-1", "gpu-2"}


def test_unreadable_history_fails_closed_and_is_kept(paths):
    history_path, metrics_path = paths
    history_path.parent.mkdir(parents=True)
    history_path.write_text("{not json")
    runner = healthy_runner()
    report = run_sweep(SlurmClient(runner=runner), passing, history_path, metrics_path, now=NOW)
    assert not report.ok and "history unreadable" in report.error
    assert runner.calls == []
    assert history_path.read_text() == "{not json"
    assert metric(metrics_path, "megahour_sweep_history_ok") == "0"


def test_malformed_history_entries_are_dropped_with_a_warning(paths):
    history_path, _ = paths
    history_path.parent.mkdir(parents=True)
    history_path.write_text(
        json.dumps(
            {
                "version": 1,
                "actions": [
                    {"node": "gpu-1", "kind": "resume", "at": "2026-11-29T12:00:00"},
                    {"node": "gpu-2", "kind": "reboot", "at": "2026-11-29T12:00:00"},
                    {"node": "gpu-3", "kind": "resume", "at": "yesterday"},
                    "junk",
                ],
            }
        )
    )
    warnings: list[str] = []
    assert load_history(history_path, warnings) == [Action("gpu-1", "resume", datetime(2026, 11, 29, 12))]
    assert len(warnings) == 3


def test_a_failed_metrics_write_leaves_the_old_file_whole_and_no_temp_files(paths, monkeypatch):
    history_path, metrics_path = paths
    metrics_path.parent.mkdir(parents=True)
    metrics_path.write_text("megahour_sweep_query_ok 1\n")

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    report = run_sweep(SlurmClient(runner=healthy_runner()), passing, history_path, metrics_path, now=NOW)
    assert metrics_path.read_text() == "megahour_sweep_query_ok 1\n"
    assert any("could not write metrics" in w for w in report.warnings)
    assert any("could not write history" in w for w in report.warnings)
    assert no_temp_files(metrics_path.parent)
    assert not history_path.parent.exists() or no_temp_files(history_path.parent)


def test_unparseable_squeue_lines_block_reservation_deletes(paths):
    history_path, metrics_path = paths
    runner = healthy_runner(squeue=SQUEUE + "4300|(null)|(null)\n")
    report = run_sweep(SlurmClient(runner=runner), passing, history_path, metrics_path, now=NOW)
    assert report.reservations_deleted == []
    assert ("megahour-maint-1", "job list incomplete") in report.plan.reservations_kept
    assert any("squeue line not understood" in w for w in report.warnings)


def test_no_reservations_and_nothing_drained(paths):
    history_path, metrics_path = paths
    runner = healthy_runner(
        sinfo="gpu-1|idle|none|Unknown|Unknown\n", reservations="No reservations in the system\n", squeue=""
    )
    report = run_sweep(SlurmClient(runner=runner), passing, history_path, metrics_path, now=NOW)
    assert report.ok and report.resumed == [] and report.alerts == []
    assert metric(metrics_path, "megahour_sweep_query_ok") == "1"
