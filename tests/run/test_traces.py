from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from megahour.run import traces
from megahour.run.policy import Decision
from megahour.run.traces import (
    DEFAULT_TRACE_ROOT,
    REDACTED,
    AttemptRecord,
    job_id,
    redact_env,
    resolve_trace_root,
    write_attempt,
)


def _record(**overrides) -> AttemptRecord:
    fields = {
        "job_id": "42",
        "command": ("python", "train.py"),
        "slurm_restart_count": 1,
        "local_restart": 0,
        "slurm_procid": "0",
        "hostname": "gpu-1",
        "started_at": "2024-01-01T00:00:00.000+00:00",
        "ended_at": "2024-01-01T00:01:00.000+00:00",
        "returncode": -9,
        "classification": "transient",
        "decision": Decision("restart", -9, 1, "transient"),
        "checkpoint": "step-1@1",
        "signal": None,
    }
    return AttemptRecord(**{**fields, **overrides})


def test_redacts_secret_looking_keys_case_insensitively():
    env = {
        "HF_TOKEN": "hf_abc",
        "WANDB_API_KEY": "k",
        "aws_secret_access_key": "s",
        "DB_Password": "p",
        "PATH": "/usr/bin",
        "SLURM_JOB_ID": "42",
    }
    assert redact_env(env) == {
        "DB_Password": REDACTED,
        "HF_TOKEN": REDACTED,
        "PATH": "/usr/bin",
        "SLURM_JOB_ID": "42",
        "WANDB_API_KEY": REDACTED,
        "aws_secret_access_key": REDACTED,
    }


def test_job_id_and_trace_root_resolution(tmp_path):
    assert job_id({"SLURM_JOB_ID": "123"}, 7) == "123"
    assert job_id({}, 7) == job_id({"SLURM_JOB_ID": ""}, 7) == "nojob-7"
    assert resolve_trace_root(str(tmp_path), {"MEGAHOUR_TRACE_ROOT": "/env"}) == tmp_path
    assert resolve_trace_root(None, {"MEGAHOUR_TRACE_ROOT": "/env"}) == Path("/env")
    assert resolve_trace_root(None, {}) == DEFAULT_TRACE_ROOT


def test_writes_a_complete_attempt_directory(tmp_path):
    verdicts = tmp_path / "verdicts.json"
    verdicts.write_text('{"gpu-1": "healthy"}')
    env = {"MEGAHOUR_HEALTH_VERDICTS": str(verdicts), "HF_TOKEN": "hf_secret", "HOME": "/root"}
    final = write_attempt(tmp_path / "42", _record(), env, ["first", "last"])
    assert final == tmp_path / "42" / "attempt-0"
    assert sorted(p.name for p in final.iterdir()) == ["env.json", "health.json", "log-tail.txt", "meta.json"]
    meta = json.loads((final / "meta.json").read_text())
    assert meta["attempt"] == 0
    assert meta["command"] == ["python", "train.py"]
    assert meta["decision"] == {
        "action": "restart",
        "exit_code": -9,
        "restarts_used": 1,
        "reason": "transient",
    }
    assert (meta["returncode"], meta["slurm_restart_count"], meta["local_restart"]) == (-9, 1, 0)
    assert (final / "log-tail.txt").read_text() == "first\nlast\n"
    assert (final / "health.json").read_text() == '{"gpu-1": "healthy"}'
    env_json = (final / "env.json").read_text()
    assert "hf_secret" not in env_json
    assert json.loads(env_json)["HOME"] == "/root"


def test_missing_health_file_is_skipped(tmp_path):
    env = {"MEGAHOUR_HEALTH_VERDICTS": str(tmp_path / "absent.json")}
    final = write_attempt(tmp_path / "42", _record(), env, [])
    assert not (final / "health.json").exists()
    assert (final / "log-tail.txt").read_text() == ""


def test_indices_continue_after_existing_attempts(tmp_path):
    job = tmp_path / "42"
    first = write_attempt(job, _record(), {}, [])
    second = write_attempt(job, _record(local_restart=1), {}, [])
    assert (first.name, second.name) == ("attempt-0", "attempt-1")
    assert json.loads((second / "meta.json").read_text())["attempt"] == 1


def test_a_racing_writer_makes_us_take_the_next_index(tmp_path, monkeypatch):
    job = tmp_path / "42"
    write_attempt(job, _record(), {}, [])
    real = traces.next_attempt_index
    calls = []

    def stale_first(names):
        # Our first listing happened before the other writer's rename landed.
        calls.append(names)
        return 0 if len(calls) == 1 else real(names)

    monkeypatch.setattr(traces, "next_attempt_index", stale_first)
    final = write_attempt(job, _record(local_restart=1), {}, [])
    assert final.name == "attempt-1"
    assert json.loads((final / "meta.json").read_text())["attempt"] == 1
    assert json.loads((job / "attempt-0" / "meta.json").read_text())["local_restart"] == 0
    assert sorted(p.name for p in job.iterdir()) == ["attempt-0", "attempt-1"]
    assert len(calls) == 2


def test_failure_leaves_no_temporary_directory(tmp_path, monkeypatch):
    job = tmp_path / "42"

    real_replace = os.replace

    def broken_rename(src, dst):
        # The files inside the temporary directory are written; the directory's own rename fails.
        if Path(src).is_dir():
            raise PermissionError(13, "Permission denied")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", broken_rename)
    with pytest.raises(PermissionError):
        write_attempt(job, _record(), {}, [])
    assert list(job.iterdir()) == []


def test_a_trace_is_private_and_holds_no_credential(tmp_path):
    """The audit's case: credentials inside environment values (a URL with a password), in the command
    line and in the job's output were written in clear, to world-readable files."""
    old = os.umask(0o022)
    try:
        env = {
            "DATABASE_URL": "postgresql://airflow:pg-pass-1@db:5432/airflow",
            "MLFLOW_TRACKING_URI": "https://mlflow.lab/api?token=tok-abc-123",
            "HOME": "/root",
        }
        command = ("python", "train.py", "--hf-token", "hf_tok_value", "--wandb-key=wb-value-9")
        tail = [
            "fetching s3://b/k?X-Amz-Signature=sig-value-7",
            "Authorization: Bearer bearer-value-8",
            "ok",
            "-----BEGIN OPENSSH PRIVATE KEY-----",
            "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ-key-body-line",
            "-----END OPENSSH PRIVATE KEY-----",
        ]
        final = write_attempt(tmp_path / "42", _record(command=command), env, tail)
    finally:
        os.umask(old)
    assert final.stat().st_mode & 0o777 == 0o700
    for path in final.iterdir():
        assert path.stat().st_mode & 0o777 == 0o600, path
        text = path.read_text()
        for secret in (
            "pg-pass-1",
            "tok-abc-123",
            "hf_tok_value",
            "wb-value-9",
            "sig-value-7",
            "bearer-value-8",
        ):
            assert secret not in text, f"{secret} in {path.name}"
    written = json.loads((final / "env.json").read_text())
    assert written["DATABASE_URL"] == f"postgresql://airflow:{REDACTED}@db:5432/airflow"  # the host stays
    meta = json.loads((final / "meta.json").read_text())
    assert meta["command"] == ["python", "train.py", "--hf-token", REDACTED, f"--wandb-key={REDACTED}"]
    assert (final / "log-tail.txt").read_text().splitlines()[2] == "ok"
