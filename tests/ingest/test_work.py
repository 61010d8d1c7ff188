"""The ingestion steps end to end on simulated raw episodes, against the embedded warehouse."""

from __future__ import annotations

import json
import shutil

import pytest

from megahour.cli import main
from megahour.curation import episodes_table
from megahour.ingest import monolithic, object_store, quarantine, work
from megahour.ingest.config import IngestConfig
from megahour.ingest.landing import write_landing
from megahour.ingest.runfiles import RunDir

GOOD, CORRUPT = 4, 1


@pytest.fixture(scope="module")
def landed(tmp_path_factory):
    dest = tmp_path_factory.mktemp("landing-src")
    episodes = write_landing(dest, GOOD + CORRUPT, corrupt=CORRUPT, seconds=0.5, seed=3)
    return dest, episodes


@pytest.fixture
def fresh(warehouse, landed, tmp_path, monkeypatch):
    """A landing zone, an empty store and an empty `megahour` database for one test."""
    monkeypatch.setenv("MEGAHOUR_WAREHOUSE", warehouse.url)  # what steps open when not handed one
    warehouse.execute("DROP DATABASE IF EXISTS megahour")
    src, episodes = landed
    landing = tmp_path / "landing"
    shutil.copytree(src, landing)
    config = IngestConfig(
        landing=str(landing),
        storage=str(tmp_path / "storage"),
        runs=str(tmp_path / "runs"),
        max_workers=2,
        worker_overhead_s=0,
    )
    yield config, episodes
    warehouse.execute("DROP DATABASE IF EXISTS megahour")


def _run_dag_like(config, warehouse, run_dir, params=None, logs=None):
    """Every step as the DAG runs them (one call per task), collecting failures like Airflow would."""
    failed = []
    log = logs.append if logs is not None else lambda _: None
    work.execute("discover", run_dir, params=params or {}, config=config, log=log, warehouse=warehouse)
    work.execute("plan", run_dir, config=config, log=log, warehouse=warehouse)
    batches = len(RunDir(run_dir).plan()["batches"])
    for b in range(batches):
        for step in ("validate", "transcode", "upload", "register", "previews", "qc"):
            try:
                work.execute(step, run_dir, b, config=config, log=log, warehouse=warehouse)
            except work.StepFailed:
                failed.append((step, b))
    try:
        summary = work.execute("summary", run_dir, config=config, log=log, warehouse=warehouse)
    except work.StepFailed:
        summary = None
    return summary, failed


def test_good_episodes_land_once_and_the_corrupt_one_is_quarantined(fresh, warehouse, tmp_path) -> None:
    config, episodes = fresh
    summary, failed = _run_dag_like(config, warehouse, tmp_path / "runs" / "r1")
    assert failed == []
    assert summary["succeeded"] and summary["registered"] == GOOD
    assert RunDir(tmp_path / "runs" / "r1").plan()["workers"] == 2
    stored = sorted(p.name for p in (tmp_path / "storage" / "episodes").iterdir())
    assert stored == sorted(f"{e.episode_id}.mcap" for e in episodes if not e.corrupt)
    assert episodes_table.count(warehouse) == GOOD
    bad = next(e for e in episodes if e.corrupt)
    reasons = quarantine.reasons(warehouse)
    assert list(reasons) == [bad.episode_id] and "chunk does not decode" in reasons[bad.episode_id]
    assert (tmp_path / "storage" / "quarantine" / f"{bad.episode_id}.mcap").exists()
    assert [q["episode_id"] for q in summary["quarantined"]] == [bad.episode_id]
    assert summary["episode_hours"] > 0
    assert list(RunDir(tmp_path / "runs" / "r1").staging.glob("*.mcap")) == []  # removed once stored

    # A second run over the same landing zone replaces objects and rows instead of adding any. (Its
    # transcodes may differ by a few bytes: chDB's queries in this process change the floating-point
    # state libx264's rate control sees. So this checks the store and FINAL, not byte equality.)
    summary2, _ = _run_dag_like(config, warehouse, tmp_path / "runs" / "r2")
    assert summary2["succeeded"] and summary2["registered"] == GOOD
    assert sorted(p.name for p in (tmp_path / "storage" / "episodes").iterdir()) == stored
    assert episodes_table.count(warehouse) == GOOD
    assert list((tmp_path / "storage" / ".incoming").iterdir()) == []


def test_a_killed_transcode_and_upload_leave_nothing_partial_on_retry(fresh, warehouse, tmp_path) -> None:
    config, episodes = fresh
    run_dir = tmp_path / "runs" / "k"
    work.execute("discover", run_dir, params={"max_workers": 1}, config=config, warehouse=warehouse)
    work.execute("plan", run_dir, config=config, warehouse=warehouse)
    work.execute("validate", run_dir, 0, config=config, warehouse=warehouse)
    run = RunDir(run_dir)
    # What a SIGKILL mid-write leaves: a temporary beside the staged output, and one under .incoming.
    run.staging.mkdir(parents=True)
    victim = episodes[0].episode_id
    (run.staging / f".{victim}.mcap.0123456789ab.tmp").write_bytes(b"half")
    (run.staging / f".{victim}.mcap.k3j2h1.partial").write_bytes(b"left by an older version")
    incoming = tmp_path / "storage" / ".incoming"
    incoming.mkdir(parents=True, exist_ok=True)
    first = work.execute("transcode", run_dir, 0, config=config, warehouse=warehouse)
    assert not list(run.staging.glob(".*"))
    again = work.execute("transcode", run_dir, 0, config=config, warehouse=warehouse)  # the retry
    assert [e["episode_id"] for e in again["done"]] == [e["episode_id"] for e in first["done"]]
    digest = object_store.sha256_of(run.staging / f"{victim}.mcap")
    (incoming / f"episodes__{victim}.mcap.{digest[:16]}.0123456789ab.tmp").write_bytes(b"half an upload")
    (incoming / f"episodes__{victim}.mcap.{digest[:16]}").write_bytes(b"left by an older version")
    work.execute("upload", run_dir, 0, config=config, warehouse=warehouse)
    work.execute("upload", run_dir, 0, config=config, warehouse=warehouse)
    assert list(incoming.iterdir()) == []
    stored = list((tmp_path / "storage" / "episodes").iterdir())
    assert len(stored) == GOOD and all(not p.name.startswith(".") for p in stored)
    for _ in range(2):
        work.execute("register", run_dir, 0, config=config, warehouse=warehouse)
    assert int(warehouse.query_json("SELECT count() FROM megahour.episodes")["data"][0][0]) == GOOD


def test_a_failing_noncritical_step_is_reported_and_the_run_stays_green(fresh, warehouse, tmp_path) -> None:
    config, _ = fresh
    summary, failed = _run_dag_like(config, warehouse, tmp_path / "runs" / "d", {"fail_steps": ["qc"]})
    assert sorted(failed) == [("qc", 0), ("qc", 1)]
    assert summary["succeeded"] and summary["noncritical_failures"] == ["qc[0]", "qc[1]"]
    assert episodes_table.count(warehouse) == GOOD


def test_a_failing_critical_step_fails_the_run(fresh, warehouse, tmp_path) -> None:
    config, _ = fresh
    summary, failed = _run_dag_like(config, warehouse, tmp_path / "runs" / "c", {"fail_steps": ["upload"]})
    assert summary is None  # summary raised StepFailed
    assert ("upload", 0) in failed and ("register", 0) in failed
    report = RunDir(tmp_path / "runs" / "c").result("summary")
    assert not report["succeeded"] and "upload[0]" in report["critical_failures"]


def test_steps_switched_off_are_skipped_and_validate_off_still_quarantines(
    fresh, warehouse, tmp_path
) -> None:
    config, episodes = fresh
    params = {"steps": {"validate": False, "previews": False}}
    summary, failed = _run_dag_like(config, warehouse, tmp_path / "runs" / "t", params)
    assert failed == [] and summary["succeeded"]
    assert summary["steps_off"] == ["previews", "validate"]
    assert not (tmp_path / "storage" / "previews").exists()
    assert episodes_table.count(warehouse) == GOOD
    assert list(quarantine.reasons(warehouse)) == [next(e for e in episodes if e.corrupt).episode_id]


def test_a_rerun_of_the_same_run_is_judged_by_its_own_results(fresh, warehouse, tmp_path) -> None:
    config, _ = fresh
    run_dir = tmp_path / "runs" / "again"
    summary, _ = _run_dag_like(config, warehouse, run_dir)
    assert summary["succeeded"]
    # The run is cleared and goes again, and this time upload fails: old results must not hide it.
    summary, failed = _run_dag_like(config, warehouse, run_dir, {"fail_steps": ["upload"]})
    assert summary is None and ("upload", 0) in failed


def test_unsafe_episode_ids_and_environment_errors_are_not_quarantined_as_corrupt(
    fresh, warehouse, tmp_path, monkeypatch
) -> None:
    config, episodes = fresh
    good = next(e for e in episodes if not e.corrupt)
    with pytest.raises(work.StepFailed, match="not a safe file name"):
        monkeypatch.setattr(work.mcapio, "open_index", _index_with_id("../../steps/register-0"))
        work.raw_info(good.path)
    monkeypatch.undo()
    run_dir = tmp_path / "runs" / "perm"
    work.execute("discover", run_dir, params={"max_workers": 1}, config=config, warehouse=warehouse)
    work.execute("plan", run_dir, config=config, warehouse=warehouse)

    def denied(path):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(work, "check_raw", denied)
    with pytest.raises(work.StepFailed, match="EACCES"):
        work.execute("validate", run_dir, 0, config=config, warehouse=warehouse)
    assert quarantine.reasons(warehouse) == {}


def _index_with_id(episode_id: str):
    real = work.mcapio.open_index

    def fake(source, **options):
        index = real(source, **options)
        index.metadata[work.LABELS_METADATA] = {
            **index.metadata[work.LABELS_METADATA],
            "episode_id": episode_id,
        }
        return index

    return fake


def test_bad_params_are_refused_with_the_names(fresh, warehouse, tmp_path) -> None:
    config, _ = fresh
    with pytest.raises(work.StepFailed, match="credentials"):
        work.execute("discover", tmp_path / "r", params={"warehouse": "http://u:p@h:8123"}, config=config)
    with pytest.raises(work.StepFailed, match="unknown run params colour"):
        work.execute("discover", tmp_path / "r", params={"colour": 1}, config=config, warehouse=warehouse)
    with pytest.raises(ValueError, match="qcc"):
        work.execute("discover", tmp_path / "r", params={"fail_steps": ["qcc"]}, config=config)
    with pytest.raises(work.StepFailed, match="--batch"):
        work.execute("validate", tmp_path / "r", config=config)


def test_monolithic_baseline_and_cli(fresh, warehouse, tmp_path, capsys, monkeypatch) -> None:
    config, _ = fresh
    summary = monolithic.run_monolithic(tmp_path / "runs" / "m", config=config, log=lambda _: None)
    assert summary["registered"] == GOOD and len(summary["quarantined"]) == CORRUPT
    assert RunDir(tmp_path / "runs" / "m").plan()["workers"] == 1
    cfg_file = tmp_path / "ingest.yml"
    cfg_file.write_text(f"landing: {config.landing}\nstorage: {config.storage}\nruns: {config.runs}\n")
    capsys.readouterr()
    assert main(["ingest", "plan", "--config", str(cfg_file), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert sum(len(b) for b in plan["files"]) == GOOD + CORRUPT
    assert (
        main(["ingest", "step", "summary", "--run-dir", str(tmp_path / "nope"), "--config", str(cfg_file)])
        == 1
    )
