from __future__ import annotations

import pytest

from megahour.ingest.config import IngestConfig, IngestConfigError, load_config
from megahour.ingest.runfiles import RunDir, RunDirError, batch_count, safe_run_id, write_json
from megahour.ingest.steps import STEPS, UnknownStepError, enabled_steps, result_name, run_outcome


def test_only_previews_and_qc_are_noncritical() -> None:
    assert {n for n, s in STEPS.items() if not s.critical} == {"previews", "qc"}
    assert all(s.cpus >= 1 and s.mem_mb >= 256 and s.time_limit_min >= 1 for s in STEPS.values())


def test_toggles_default_on_and_refuse_typos_and_summary_off() -> None:
    assert enabled_steps({"qc": False}) == {n: n != "qc" for n in STEPS}
    with pytest.raises(UnknownStepError, match="qcc"):
        enabled_steps({"qcc": False})
    with pytest.raises(UnknownStepError, match="summary"):
        enabled_steps({"summary": False})


def _all_finished(batches: int, skip: set[str] = frozenset()) -> set[str]:
    names = set()
    for name, spec in STEPS.items():
        for b in range(batches) if spec.per_batch else [None]:
            label = result_name(name, b)
            if label not in skip:
                names.add(label)
    return names


def test_noncritical_failure_leaves_the_run_green_and_reported() -> None:
    outcome = run_outcome(enabled_steps({}), 2, _all_finished(2, {"qc-1.json"}))
    assert outcome.succeeded
    assert [(o.step, o.batch) for o in outcome.noncritical_failures] == [("qc", 1)]
    assert outcome.critical_failures == []


def test_critical_failure_fails_the_run() -> None:
    outcome = run_outcome(enabled_steps({}), 2, _all_finished(2, {"transcode-0.json", "upload-0.json"}))
    assert not outcome.succeeded
    assert [(o.step, o.batch) for o in outcome.critical_failures] == [("transcode", 0), ("upload", 0)]


def test_switched_off_steps_are_not_failures() -> None:
    enabled = enabled_steps({"previews": False, "validate": False})
    finished = _all_finished(1, {"previews-0.json", "validate-0.json"})
    outcome = run_outcome(enabled, 1, finished)
    assert outcome.succeeded
    assert {o.step for o in outcome.steps if o.status == "off"} == {"previews", "validate"}


def test_an_empty_landing_zone_is_a_green_run_with_no_batch_steps() -> None:
    outcome = run_outcome(enabled_steps({}), 0, {"discover.json", "plan.json"})
    assert outcome.succeeded
    assert {o.step for o in outcome.steps} == {"discover", "plan"}


def test_a_run_without_a_plan_fails() -> None:
    outcome = run_outcome(enabled_steps({}), None, {"discover.json"})
    assert not outcome.succeeded
    assert "plan" in {o.step for o in outcome.critical_failures}


def test_safe_run_ids_and_run_files(tmp_path) -> None:
    assert safe_run_id("manual__2026-11-29T22:50:00+00:00") == "manual__2026-11-29T22_50_00_00_00"
    with pytest.raises(RunDirError):
        safe_run_id(":::")
    run = RunDir(tmp_path / "r")
    with pytest.raises(RunDirError, match=r"plan\.json"):
        run.plan()
    write_json(run.plan_json, {"batches": [[0], [1], [2]]})
    assert batch_count(run.path) == 3
    run.plan_json.write_text("{")
    with pytest.raises(RunDirError, match="not JSON"):
        run.plan()


def test_config_loads_rejects_unknown_keys_and_bad_values(tmp_path, monkeypatch) -> None:
    path = tmp_path / "ingest.yml"
    path.write_text("landing: /data/landing\nmax_workers: 4\n")
    cfg = load_config(path)
    assert cfg.landing == "/data/landing" and cfg.max_workers == 4 and cfg.partition == "ingest"
    path.write_text("landng: /x\n")
    with pytest.raises(IngestConfigError, match="unknown keys landng"):
        load_config(path)
    with pytest.raises(IngestConfigError, match="absolute path or s3://BUCKET/PREFIX"):
        IngestConfig(storage="relative/dir")
    # the landing zone and the episode store may be bucket prefixes; the runs folder may not
    assert IngestConfig(landing="s3://fleet/site-a", storage="s3://lab-episodes/v1").storage.startswith(
        "s3://"
    )
    with pytest.raises(IngestConfigError, match="storage: s3://Lab_Episodes/v1: 'Lab_Episodes' is not an S3"):
        IngestConfig(storage="s3://Lab_Episodes/v1")
    with pytest.raises(IngestConfigError, match=r"runs='s3://x/y': give an absolute path$"):
        IngestConfig(runs="s3://x/y")
    with pytest.raises(IngestConfigError, match="no such file"):
        load_config(tmp_path / "absent.yml")
    monkeypatch.setenv("MEGAHOUR_INGEST_CONFIG", str(tmp_path / "absent.yml"))
    with pytest.raises(IngestConfigError, match="MEGAHOUR_INGEST_CONFIG"):
        load_config()
