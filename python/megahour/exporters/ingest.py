"""Ingestion's own figures as Prometheus families, from the runs' summaries (pure but for ``read_runs``).

Airflow's metrics (DAG run durations, task outcomes, the scheduler's heartbeat) reach Prometheus through
StatsD and the statsd_exporter (roles/monitoring, docs/monitoring.md). What only megahour knows is here:
``megahour metrics ingest`` runs on the Airflow host and reads each run directory under the ingest
settings' ``runs`` (``<run>/steps/summary.json``, written by the run's summary step): episodes registered
and quarantined, episode time, bytes, and which steps failed, critical or not.

The totals are sums over the run directories kept: a run directory removed by hand takes its figures
with it, which Prometheus reads as a counter reset (``rate()`` and ``increase()`` handle it). A run
without a summary yet counts as unfinished. A summary that cannot be read is counted in
``megahour_ingest_exporter_skipped`` and named on stderr, never read as zeros.

With ``$MEGAHOUR_STATSD_EXPORTER_URL`` set (the monitoring role sets it on the Airflow host), the same
file carries Airflow's ``airflow_*`` series read from that statsd_exporter (it listens on loopback only,
having no TLS or authentication of its own), so they reach Prometheus over node_exporter's HTTPS;
``megahour_ingest_statsd_relay_ok`` says whether that read worked.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from megahour.metrics.textfile import Family, run_status

TEXTFILE_NAME = "megahour_ingest"
# Airflow's series as statsd_exporter serves them (roles/monitoring/files/statsd-mapping.yml); only these
# are relayed: statsd_exporter's own go_*/process_* would clash with node_exporter's.
RELAYED_PREFIX = "airflow_"


@dataclass(frozen=True)
class RunFigures:
    run_id: str
    finished_at: float | None  # the summary's mtime; None while the run has no summary
    succeeded: bool = False
    registered: int = 0
    quarantined: int = 0
    episode_hours: float = 0.0
    bytes: int = 0
    critical_failures: int = 0
    noncritical_failures: int = 0


@dataclass
class RunsReading:
    runs: list[RunFigures] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "RUN: why"
    problem: str | None = None  # the runs directory itself could not be listed


def figures(run_id: str, summary: dict, finished_at: float) -> RunFigures:
    """One run's figures from its summary step's report (``megahour.ingest.work.summary``)."""
    try:
        return RunFigures(
            run_id=run_id,
            finished_at=finished_at,
            succeeded=bool(summary["succeeded"]),
            registered=int(summary["registered"]),
            quarantined=len(summary["quarantined"]),
            episode_hours=float(summary["episode_hours"]),
            bytes=int(summary["bytes"]),
            critical_failures=len(summary["critical_failures"]),
            noncritical_failures=len(summary["noncritical_failures"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"summary.json lacks or mangles {exc}: not a megahour ingest summary") from None


def read_runs(runs_dir: str | Path) -> RunsReading:
    reading = RunsReading()
    root = Path(runs_dir)
    try:
        entries = sorted(p for p in root.iterdir() if p.is_dir())
    except OSError as exc:
        reading.problem = f"cannot list the runs directory {root}: {exc} (the ingest settings' `runs`)"
        return reading
    for run in entries:
        summary = run / "steps" / "summary.json"
        try:
            stat = summary.stat()
        except FileNotFoundError:
            reading.runs.append(RunFigures(run.name, None))
            continue
        except OSError as exc:
            reading.skipped.append(f"{run.name}: {exc}")
            continue
        try:
            reading.runs.append(figures(run.name, json.loads(summary.read_bytes()), stat.st_mtime))
        except (OSError, ValueError) as exc:
            reading.skipped.append(f"{run.name}: {exc}")
    return reading


def families(reading: RunsReading, *, now: float) -> list[Family]:
    result = [
        *run_status(
            "ingest", not reading.problem, "1 when the runs directory could be listed this run.", now
        ),
        Family(
            "megahour_ingest_exporter_skipped", "Run summaries that could not be read (named on stderr)."
        ).add(len(reading.skipped)),
    ]
    if reading.problem:
        return result
    finished = [r for r in reading.runs if r.finished_at is not None]
    runs = Family("megahour_ingest_runs", "Run directories kept, by outcome (unfinished: no summary yet).")
    for outcome, count in (
        ("succeeded", sum(r.succeeded for r in finished)),
        ("failed", sum(not r.succeeded for r in finished)),
        ("unfinished", len(reading.runs) - len(finished)),
    ):
        runs.add(count, outcome=outcome)
    episodes = Family(
        "megahour_ingest_episodes_total", "Episodes the kept runs registered or quarantined.", "counter"
    )
    episodes.add(sum(r.registered for r in finished), result="registered")
    episodes.add(sum(r.quarantined for r in finished), result="quarantined")
    failures = Family(
        "megahour_ingest_step_failures_total",
        "Steps (one per batch) that failed for good in the kept runs: critical ones fail the run, "
        "non-critical ones (previews, qc) are reported only.",
        "counter",
    )
    failures.add(sum(r.critical_failures for r in finished), criticality="critical")
    failures.add(sum(r.noncritical_failures for r in finished), criticality="non-critical")
    result += [
        runs,
        episodes,
        failures,
        # Prometheus's base unit: episode-hours per hour is increase(...[1h]) / 3600.
        Family(
            "megahour_ingest_episode_seconds_total",
            "Seconds of episodes the kept runs registered.",
            "counter",
        ).add(round(3600 * sum(r.episode_hours for r in finished), 3)),
        Family("megahour_ingest_bytes_total", "Bytes of episodes the kept runs stored.", "counter").add(
            sum(r.bytes for r in finished)
        ),
    ]
    if finished:
        last = max(finished, key=lambda r: r.finished_at or 0.0)
        result += [
            Family(
                "megahour_ingest_last_run_end_timestamp_seconds",
                "Unix time the newest run's summary was written.",
            ).add(last.finished_at or 0.0),
            Family("megahour_ingest_last_run_succeeded", "1 when the newest finished run succeeded.").add(
                int(last.succeeded)
            ),
        ]
    return result


def relay(exposition: str, prefix: str = RELAYED_PREFIX) -> tuple[str, int]:
    """The families of ``exposition`` (Prometheus text) whose names start with ``prefix``, as text for the
    same textfile, and how many samples that is. Their HELP and TYPE lines go with them."""
    kept: list[str] = []
    samples = 0
    for line in exposition.splitlines():
        if line.startswith("#"):
            words = line.split(maxsplit=3)
            if len(words) >= 3 and words[1] in ("HELP", "TYPE") and words[2].startswith(prefix):
                kept.append(line)
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name.startswith(prefix):
            kept.append(line)
            samples += 1
    return ("\n".join(kept) + "\n" if kept else ""), samples


def summary(reading: RunsReading) -> dict[str, int]:
    finished = sum(r.finished_at is not None for r in reading.runs)
    return {"runs": len(reading.runs), "finished": finished, "skipped": len(reading.skipped)}
