"""One run's working folder on the shared filesystem: its settings, plan and each step's result.

Layout of ``<runs>/<run_id>/``: ``run.json`` (params and settings, written by discover), ``plan.json``,
``steps/<step>[-<batch>].json`` (a step's result, written last and atomically, so its presence means the
step finished), ``staging/`` (transcoded episodes before upload) and ``logs/`` (Slurm job output).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from megahour.atomicio import atomic_write_text
from megahour.ingest.steps import result_name

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class RunDirError(RuntimeError):
    pass


def safe_run_id(run_id: str) -> str:
    """A folder name for an Airflow run id (``manual__2026-11-29T22:50:00+00:00``): no ':' or '+'."""
    cleaned = _UNSAFE.sub("_", run_id).strip("._")
    if not cleaned:
        raise RunDirError(f"run id {run_id!r} has no usable characters")
    return cleaned


def write_json(path: Path, data: object) -> None:
    atomic_write_text(Path(path), json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def read_json(path: Path, what: str) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise RunDirError(f"{path}: {what} is missing; the step that writes it has not finished") from None
    except json.JSONDecodeError as exc:
        raise RunDirError(f"{path}: {what} is not JSON ({exc.msg}); rerun the step that writes it") from None


class RunDir:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @property
    def run_json(self) -> Path:
        return self.path / "run.json"

    @property
    def plan_json(self) -> Path:
        return self.path / "plan.json"

    @property
    def steps(self) -> Path:
        return self.path / "steps"

    @property
    def staging(self) -> Path:
        return self.path / "staging"

    @property
    def logs(self) -> Path:
        return self.path / "logs"

    def result_path(self, step: str, batch: int | None = None) -> Path:
        return self.steps / result_name(step, batch)

    def run(self) -> dict:
        return read_json(self.run_json, "the run's settings (run.json)")

    def plan(self) -> dict:
        return read_json(self.plan_json, "the batch plan (plan.json)")

    def result(self, step: str, batch: int | None = None) -> dict | None:
        path = self.result_path(step, batch)
        return read_json(path, f"the {step} result") if path.exists() else None

    def write_result(self, step: str, batch: int | None, data: dict) -> None:
        write_json(self.result_path(step, batch), data)

    def finished(self) -> set[str]:
        return {p.name for p in self.steps.glob("*.json")} if self.steps.is_dir() else set()


def batch_count(run_dir: str | Path) -> int:
    """How many batches plan.json holds (the Airflow DAG maps the per-batch steps over them)."""
    return len(RunDir(run_dir).plan()["batches"])
