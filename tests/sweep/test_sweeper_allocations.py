"""The sweeper's stale GPU allocation check, end to end with a fake Slurm answering real captures."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest

from megahour.slurm.client import SlurmClient
from megahour.sweep.allocations import ALERT_STALE_GPU_ALLOCATION, Sighting
from megahour.sweep.rules import SweepPolicy
from megahour.sweep.sweeper import load_history, load_sweep_history, render_history, run_sweep
from tests.slurm.fixtures import FakeRunner, capture, completed, healthy_runner

NOW = datetime(2026, 11, 29, 14, 30, 0)
RECONFIGURE = ["scontrol", "reconfigure"]
REQUEUE_8 = ["scontrol", "requeue", "8"]
# gpu-1 idle with 3 GPUs allocated, and a job list of finished jobs: stale (both real captures).
STALE_NODE = capture("sinfo-suspended.json")
NO_JOBS = capture("squeue-idle.json")
CLEARED_NODE = capture("sinfo-idle.json")


@pytest.fixture
def paths(tmp_path):
    return tmp_path / "state" / "sweep-history.json", tmp_path / "textfile" / "megahour_sweep.prom"


def passing(node: str) -> str:
    return "PASS"


def metric(path, sample: str) -> str | None:
    for line in path.read_text().splitlines():
        if line.startswith(sample + " "):
            return line.split(" ", 1)[1]
    return None


def stale_cluster(cleared_by_reconfigure: bool = True) -> FakeRunner:
    """A cluster whose gpu-1 holds stale GPUs until `scontrol reconfigure` (if it clears them)."""
    runner = healthy_runner(sinfo_json=STALE_NODE, squeue_json=NO_JOBS)

    def sinfo_json(argv):
        cleared = cleared_by_reconfigure and RECONFIGURE in runner.calls
        return completed(argv, CLEARED_NODE if cleared else STALE_NODE)

    runner.responses["sinfo --json"] = sinfo_json
    return runner


def sweep(runner, paths, now=NOW, policy=None, dry_run=False):
    history_path, metrics_path = paths
    return run_sweep(SlurmClient(runner=runner), passing, history_path, metrics_path, policy, now, dry_run)


def test_first_sighting_waits_then_the_second_sweep_reconciles_and_checks(paths):
    history_path, metrics_path = paths
    runner = stale_cluster()
    first = sweep(runner, paths)
    assert first.ok and runner.commands("scontrol reconfigure") == []
    (stale,) = first.stale.stale
    assert not stale.confirmed and first.alerts == [
        a for a in first.alerts if a.name != ALERT_STALE_GPU_ALLOCATION
    ]
    assert load_sweep_history(history_path).sightings == [Sighting("gpu-1", NOW, NOW)]
    assert metric(metrics_path, 'megahour_node_stale_gpus{node="gpu-1"}') == "3"
    assert metric(metrics_path, "megahour_sweep_allocation_check_ok") == "1"
    assert metric(metrics_path, "megahour_sweep_gpu_reconciles_total") == "0"
    assert any(
        line.startswith("no scontrol reconfigure: waiting for a second sighting") for line in first.describe()
    )

    later = NOW + timedelta(minutes=2)
    second = sweep(runner, paths, later)
    assert runner.commands("scontrol reconfigure") == [RECONFIGURE]
    assert second.reconciled == ["gpu-1"] and second.reconcile_cleared == ["gpu-1"]
    assert second.failures == []
    assert ALERT_STALE_GPU_ALLOCATION not in {a.name for a in second.alerts}
    history = load_sweep_history(history_path)
    assert history.reconciles == [later] and history.sightings == []
    assert metric(metrics_path, "megahour_sweep_gpu_reconciles_total") == "1"
    assert "ran scontrol reconfigure for gpu-1; cleared: gpu-1" in second.describe()
    # Plan, re-check before acting, check after: the node and job lists each read three times.
    assert len(runner.commands("sinfo --json")) == 1 + 3 and len(runner.commands("squeue --json")) == 1 + 3
    # The resumes and reservation deletes of the same runs went on as usual.
    assert first.resumed == ["gpu-1", "gpu-2"]


def test_still_stale_after_the_reconfigure_alerts_and_cools_down(paths):
    history_path, metrics_path = paths
    runner = stale_cluster(cleared_by_reconfigure=False)
    history_path.parent.mkdir(parents=True)
    history_path.write_text(
        render_history([], [Sighting("gpu-1", NOW - timedelta(minutes=3), NOW - timedelta(minutes=1))])
    )
    report = sweep(runner, paths)
    assert runner.commands("scontrol reconfigure") == [RECONFIGURE]
    assert report.reconciled == ["gpu-1"] and report.reconcile_cleared == []
    assert ("gpu-1", "GPU allocation still stale after scontrol reconfigure") in report.failures
    (alert,) = [a for a in report.alerts if a.name == ALERT_STALE_GPU_ALLOCATION]
    assert alert.node == "gpu-1" and alert.since == NOW - timedelta(minutes=3)
    assert (
        metric(metrics_path, 'megahour_alert_active{alertname="MegahourStaleGpuAllocation",node="gpu-1"}')
        == "1"
    )
    assert load_sweep_history(history_path).sightings == [Sighting("gpu-1", NOW - timedelta(minutes=3), NOW)]

    again = sweep(runner, paths, NOW + timedelta(minutes=1))
    assert runner.commands("scontrol reconfigure") == [RECONFIGURE]  # cooldown: not a second time
    assert again.stale.why.startswith("last scontrol reconfigure 1m ago, cooldown 1h")
    assert ALERT_STALE_GPU_ALLOCATION in {a.name for a in again.alerts}
    assert metric(metrics_path, "megahour_sweep_gpu_reconciles_total") == "0"


def test_a_node_that_is_no_longer_stale_at_the_recheck_is_left_alone(paths):
    history_path, _ = paths
    runner = healthy_runner(squeue_json=NO_JOBS)
    answers = iter([STALE_NODE, CLEARED_NODE, CLEARED_NODE])
    runner.responses["sinfo --json"] = lambda argv: completed(argv, next(answers))
    history_path.parent.mkdir(parents=True)
    history_path.write_text(
        render_history([], [Sighting("gpu-1", NOW - timedelta(minutes=3), NOW - timedelta(minutes=1))])
    )
    report = sweep(runner, paths)
    assert report.stale.reconcile and runner.commands("scontrol reconfigure") == []
    assert ("scontrol reconfigure", "no confirmed node is stale any more; left alone") in report.failures


def test_a_mixed_node_whose_jobs_hold_every_gpu_is_left_alone(paths):
    _, metrics_path = paths
    runner = healthy_runner()  # the real "mixed" captures: 3 GPUs allocated, jobs 7 and 8 hold 3
    report = sweep(runner, paths)
    assert report.stale.checked and report.stale.stale == []
    assert runner.commands("scontrol reconfigure") == []
    assert "megahour_node_stale_gpus{" not in metrics_path.read_text()
    assert metric(metrics_path, "megahour_sweep_allocation_check_ok") == "1"


def test_a_partial_job_list_does_nothing_and_keeps_the_sightings(paths):
    history_path, metrics_path = paths
    jobs = json.loads(NO_JOBS)
    jobs["jobs"].append({"job_id": 77, "job_state": "RUNNING", "nodes": "gpu-[1"})
    runner = healthy_runner(sinfo_json=STALE_NODE, squeue_json=json.dumps(jobs))
    before = Sighting("gpu-1", NOW - timedelta(minutes=3), NOW - timedelta(minutes=1))
    history_path.parent.mkdir(parents=True)
    history_path.write_text(render_history([], [before]))
    report = sweep(runner, paths)
    assert not report.stale.checked and report.stale.why == "job list incomplete"
    assert runner.commands("scontrol reconfigure") == []
    assert load_sweep_history(history_path).sightings == [before]
    assert metric(metrics_path, "megahour_sweep_allocation_check_ok") == "0"
    assert any("squeue --json: job 77" in w for w in report.warnings)
    assert "GPU allocation check not made: job list incomplete" in report.describe()


def test_slurm_errors_in_json_skip_only_the_allocation_check(paths):
    _, metrics_path = paths
    # squeue --json exits 0 with an "errors" list when slurmctld cannot be reached (real capture).
    runner = healthy_runner(squeue_json=capture("squeue-controller-down.json"))
    report = sweep(runner, paths)
    assert report.ok and report.resumed == ["gpu-1", "gpu-2"]
    assert not report.stale.checked and "Slurm query failed" in report.stale.why
    assert any("GPU allocation check skipped" in w for w in report.warnings)
    assert metric(metrics_path, "megahour_sweep_allocation_check_ok") == "0"
    assert metric(metrics_path, "megahour_sweep_query_ok") == "1"


def test_dry_run_says_it_would_reconcile_and_does_not(paths):
    history_path, metrics_path = paths
    runner = stale_cluster()
    history_path.parent.mkdir(parents=True)
    history_path.write_text(
        render_history([], [Sighting("gpu-1", NOW - timedelta(minutes=3), NOW - timedelta(minutes=1))])
    )
    report = sweep(runner, paths, dry_run=True)
    assert runner.commands("scontrol reconfigure") == [] and not metrics_path.exists()
    assert "dry run: would run scontrol reconfigure: stale GPU allocations on gpu-1" in report.describe()
    assert ALERT_STALE_GPU_ALLOCATION in {a.name for a in report.alerts}
    data = report.to_dict()
    json.dumps(data)
    assert data["allocation_check"]["reconcile_planned"] is True
    assert data["stale_allocations"][0] | {"first_seen": None} == {
        "node": "gpu-1",
        "state": "idle",
        "gpus": 4,
        "allocated": 3,
        "held": 0,
        "jobs": [],
        "stale_indices": [0, 1, 2],
        "first_seen": None,
        "confirmed": True,
    }


def test_alert_mode_never_reconfigures(paths):
    history_path, _ = paths
    runner = stale_cluster()
    history_path.parent.mkdir(parents=True)
    history_path.write_text(
        render_history([], [Sighting("gpu-1", NOW - timedelta(minutes=3), NOW - timedelta(minutes=1))])
    )
    report = sweep(runner, paths, policy=SweepPolicy(stale_allocations="alert"))
    assert runner.commands("scontrol reconfigure") == []
    assert ALERT_STALE_GPU_ALLOCATION in {a.name for a in report.alerts}


def test_off_mode_runs_no_gpu_queries(paths):
    _, metrics_path = paths
    runner = stale_cluster()
    report = sweep(runner, paths, policy=SweepPolicy(stale_allocations="off"))
    assert report.stale is None and report.to_dict()["allocation_check"] is None
    assert runner.commands("sinfo --json") == [] and runner.commands("squeue --json") == []
    assert metric(metrics_path, "megahour_sweep_allocation_check_ok") is None


def test_history_files_written_before_the_check_still_load(paths):
    history_path, _ = paths
    history_path.parent.mkdir(parents=True)
    history_path.write_text(
        json.dumps(
            {"version": 1, "actions": [{"node": "gpu-1", "kind": "resume", "at": "2026-11-29T12:00:00"}]}
        )
    )
    history = load_sweep_history(history_path)
    assert (
        [a.node for a in history.actions] == ["gpu-1"]
        and history.sightings == []
        and history.reconciles == []
    )
    warnings: list[str] = []
    history_path.write_text(
        json.dumps(
            {
                "version": 1,
                "actions": [],
                "stale_allocations": [{"node": "gpu-1", "first_seen": "x", "last_seen": "y"}, {"node": 3}],
                "reconciles": ["2026-11-29T12:00:00", None],
            }
        )
    )
    history = load_sweep_history(history_path, warnings)
    assert (
        history.sightings == [] and history.reconciles == [datetime(2026, 11, 29, 12)] and len(warnings) == 3
    )
    assert load_history(history_path) == []


def test_a_failed_reconfigure_still_counts_for_the_cooldown(paths):
    history_path, _ = paths
    runner = stale_cluster(cleared_by_reconfigure=False)
    runner.responses["scontrol reconfigure"] = (
        "",
        "slurm_reconfigure error: Socket timed out on send/recv\n",
        1,
    )
    history_path.parent.mkdir(parents=True)
    history_path.write_text(
        render_history([], [Sighting("gpu-1", NOW - timedelta(minutes=3), NOW - timedelta(minutes=1))])
    )
    report = sweep(runner, paths)
    assert report.reconciled == [] and report.failures[0][0] == "scontrol reconfigure"
    assert "Socket timed out" in report.failures[0][1]
    assert load_sweep_history(history_path).reconciles == [NOW]
    assert ALERT_STALE_GPU_ALLOCATION in {a.name for a in report.alerts}


def test_the_cli_options_parse():
    from megahour.cli import build_parser

    argv = ["sweep", "--stale-allocations", "alert", "--stale-allocation-grace-seconds", "60"]
    args = build_parser().parse_args([*argv, "--reconcile-cooldown-seconds", "600"])
    assert args.stale_allocations == "alert"
    assert (args.stale_allocation_grace_seconds, args.reconcile_cooldown_seconds) == (60, 600)
    assert build_parser().parse_args(["sweep"]).stale_allocations == "reconcile"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["sweep", "--stale-allocations", "always"])


MIXED_NODE = capture("sinfo-mixed.json")  # gpu-1: 3 of 4 GPUs allocated ...
MIXED_JOBS = capture("squeue-mixed.json")  # ... to batch jobs 7 (2) and 8 (1), started at STARTED
STARTED = datetime.fromtimestamp(
    next(j["start_time"] for j in json.loads(MIXED_JOBS)["jobs"] if j["job_id"] == 7)
)


def phantom_cluster() -> FakeRunner:
    """Job 8 is a phantom: slurmctld (restored from an older state) counts it running on gpu-1, but no
    node runs its batch step, so sstat lists only job 7's. Once requeued, its GPU is free (the faults
    scenario's case (k))."""
    runner = healthy_runner(sinfo_json=MIXED_NODE, squeue_json=MIXED_JOBS)
    runner.responses["scontrol requeue"] = ("", "", 0)
    runner.responses["sstat"] = ("7.batch\n", "", 0)

    def after_reconfigure(live, gone):
        def answer(argv):
            return completed(argv, gone if REQUEUE_8 in runner.calls else live)

        return answer

    without_8 = json.loads(MIXED_JOBS)
    without_8["jobs"] = [j for j in without_8["jobs"] if j["job_id"] != 8]
    runner.responses["squeue --json"] = after_reconfigure(MIXED_JOBS, json.dumps(without_8))
    cleared = json.loads(MIXED_NODE)
    node = cleared["nodes"][0]
    node["gres_used"] = node["gres_used"].replace("gpu:h100:3(IDX:0-2)", "gpu:h100:2(IDX:0-1)")
    node["tres_used"] = (node["tres_used"] or "").replace("gres/gpu=3", "gres/gpu=2")
    runner.responses["sinfo --json"] = after_reconfigure(MIXED_NODE, json.dumps(cleared))
    return runner


def test_a_phantom_job_no_node_runs_frees_its_gpus_through_the_reconcile(paths):
    runner = phantom_cluster()
    first = sweep(runner, paths, STARTED + timedelta(minutes=5))
    (stale,) = first.stale.stale
    assert (stale.node, stale.allocated, stale.held, stale.jobs) == ("gpu-1", 3, 2, ("7", "9"))
    assert any(
        "job 8: slurmctld counts it running on gpu-1 but no node runs its batch step" in w
        for w in first.warnings
    )
    # Only jobs old enough to have started their script are asked about, all in one sstat call.
    assert runner.commands("sstat") == [
        ["sstat", "--noheader", "--parsable2", "--format", "JobID", "--jobs", "7.batch,8.batch"]
    ]
    second = sweep(runner, paths, STARTED + timedelta(minutes=7))
    # The phantom is requeued, which frees its GPU: no reconfigure needed, so no cooldown spent.
    assert (
        runner.commands("scontrol requeue") == [REQUEUE_8] and runner.commands("scontrol reconfigure") == []
    )
    assert second.requeued == ["8"] and second.reconcile_cleared == ["gpu-1"] and second.failures == []
    assert "requeued phantom job 8 for gpu-1; cleared: gpu-1" in second.describe()
    history = load_sweep_history(paths[0])
    assert history.reconciles == [] and history.sightings == []


def test_a_job_too_young_for_its_script_is_never_called_a_phantom(paths):
    runner = phantom_cluster()
    report = sweep(runner, paths, STARTED + timedelta(seconds=30))
    assert runner.commands("sstat") == [] and report.stale.stale == []


def test_sstat_failing_skips_only_the_allocation_check(paths):
    runner = phantom_cluster()
    runner.responses["sstat"] = ("", "sstat: error: slurm_job_step_stat: timed out", 1)
    report = sweep(runner, paths, STARTED + timedelta(minutes=5))
    assert report.ok and report.stale is not None and not report.stale.checked
    assert runner.commands("scontrol reconfigure") == []


# Slurm 24.11 (Debian 13): sinfo --json groups nodes, so the node list comes from scontrol -----------------


def slurm2411_runner(nodes: str, jobs: str) -> FakeRunner:
    runner = healthy_runner(sinfo_json=capture("slurm2411-sinfo-mixed.json"), squeue_json=capture(jobs))
    runner.responses["scontrol show nodes --json"] = (capture(nodes), "", 0)
    return runner


def test_slurm_24_11_a_node_whose_job_holds_its_gpu_is_left_alone(paths):
    _, metrics_path = paths
    runner = slurm2411_runner("slurm2411-scontrol-show-nodes-mixed.json", "slurm2411-squeue-mixed.json")
    report = sweep(runner, paths)
    assert report.stale.checked and report.stale.stale == [] and report.stale.unjudged == []
    assert not [w for w in report.warnings if "--json" in w]
    # sinfo once (its grouped answer), then scontrol for every read of the node list.
    assert runner.commands("sinfo --json") == [["sinfo", "--json"]]
    assert runner.commands("scontrol show nodes --json") == [["scontrol", "show", "nodes", "--json"]]
    assert metric(metrics_path, "megahour_sweep_allocation_check_ok") == "1"


def test_slurm_24_11_an_allocated_gpu_no_job_holds_is_seen(paths):
    # Two real captures of different moments: the node with GPU 0 allocated, and the job list after the
    # job was cancelled. Together: what a stale allocation looks like on 24.11.
    runner = slurm2411_runner("slurm2411-scontrol-show-nodes-mixed.json", "slurm2411-squeue-drained.json")
    report = sweep(runner, paths)
    (stale,) = report.stale.stale
    assert (stale.node, stale.state, stale.configured, stale.allocated, stale.held) == (
        "s2411",
        "mixed",
        2,
        1,
        0,
    )
    assert stale.stale_indices == {0} and not stale.confirmed


def test_slurm_24_11_a_grouped_answer_where_a_list_was_expected_is_a_named_warning(paths):
    # scontrol answering like sinfo (a misconfigured wrapper, say): the check is not made, and the warning
    # names the command that answered and the fix.
    runner = slurm2411_runner("slurm2411-sinfo-mixed.json", "slurm2411-squeue-mixed.json")
    report = sweep(runner, paths)
    assert not report.stale.checked and report.stale.why == "node list incomplete"
    assert any(
        w.startswith("scontrol show nodes --json: sinfo --json printed records") for w in report.warnings
    )


def test_slurm_24_11_a_whole_sweep_on_real_output(paths):
    # Every query answered by 24.11 captures: the ECC drain stays, the future reservation stays.
    runner = healthy_runner(
        sinfo=capture("slurm2411-sinfo-nodes-format-drained.txt"),
        reservations=capture("slurm2411-scontrol-show-reservation.txt"),
        squeue="",  # no job running (squeue --states=RUNNING,COMPLETING prints nothing)
        sinfo_json=capture("slurm2411-sinfo-drained.json"),
        squeue_json=capture("slurm2411-squeue-drained.json"),
    )
    runner.responses["scontrol show nodes --json"] = (
        capture("slurm2411-scontrol-show-nodes-drained.json"),
        "",
        0,
    )
    report = sweep(runner, paths)
    assert report.ok and report.warnings == [] and report.failures == [] and report.resumed == []
    assert report.stale.checked and report.stale.stale == []
    assert "skip s2411: not a transient reason: ecc" in report.describe()
    assert "keep reservation megahour-maint-1: not started yet" in report.describe()
