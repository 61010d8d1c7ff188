"""The monolithic baseline: one process runs every step over every file, one after another.

This is the single-job pipeline the DAG replaced, kept so the benchmark can run both on the same
landing zone in one run. It shares the step code with the DAG; only the orchestration differs: one
batch, no Slurm, no parallelism.
"""

from __future__ import annotations

from pathlib import Path

from megahour.ingest import work
from megahour.ingest.config import IngestConfig
from megahour.ingest.steps import STEPS


def run_monolithic(
    run_dir: str | Path, params: dict | None = None, config: IngestConfig | None = None, log: work.Log = print
) -> dict:
    """Every step in order in this process; returns the summary. Raises StepFailed like the DAG's summary."""
    params = {**(params or {}), "max_workers": 1}
    work.execute("discover", run_dir, params=params, config=config, log=log)
    batches = [None]
    for name, step in STEPS.items():
        if name == "discover":
            continue
        if name == "plan":
            work.execute(name, run_dir, config=config, log=log)
            batches = list(range(len(work.RunDir(run_dir).plan()["batches"])))
            continue
        for batch in batches if step.per_batch else [None]:
            try:
                work.execute(name, run_dir, batch, config=config, log=log)
            except work.StepFailed as exc:
                if name == "summary" or step.critical:
                    raise
                log(f"{name}: non-critical step failed: {exc}")
    return work.RunDir(run_dir).result("summary") or {}
