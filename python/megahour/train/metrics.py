"""What a training run reports: one JSON line per event and step, and a Prometheus textfile.

Rank 0 alone writes (every rank holds the same all-reduced figures):

- ``<log_dir>/attempt-<k>/metrics.jsonl``: ``k`` counts every start of the job, numbered as
  ``megahour run`` numbers its traces (``job_contract``). Events are ``{"event": name, ...}``; steps
  are a :class:`StepRecord` with its derived ``data_wait_fraction`` and ``samples_per_second``. The file
  is a log, appended line by line, so a killed rank leaves every line it finished.
- ``<textfile_dir>/megahour_train[_<job>].prom``, for node_exporter's textfile collector: the last
  step's figures, written atomically (``metrics.textfile`` -> ``atomicio``).

The textfile is rewritten on the first step, then at most every ``textfile_interval_s`` (15 s, a
common scrape interval), and on ``close``. Each write fsyncs a file and its directory; at the tiny
model's tens of milliseconds a step, writing every step would spend a noticeable share of the step on
disk syncs that no scrape ever reads.

Every rank also keeps a read ledger (``ReadLedger``): ``<log_dir>/reads/rank-<r>.jsonl``, one line a step
with the (epoch, row) items the rank trained on and what reading them cost (``train.data``'s
``DELIVERY_FIELDS``), appended across every attempt of the job. The last line for a step is the one the
final parameters saw (a resumed attempt trains the steps after its checkpoint again), so
``status.summarize_reads`` can tell whether any sample was lost or trained twice.

The job is labelled ``train_job``, not ``job``: Prometheus sets ``job`` on every scraped series itself
(node_exporter's scrape job), so a textfile's ``job`` label would arrive renamed to ``exported_job``.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, TextIO

from megahour.job_contract import attempt_dir_name, next_attempt_index
from megahour.metrics import textfile

JOB_LABEL = "train_job"
TEXTFILE_INTERVAL_S = 15.0


@dataclass(frozen=True)
class StepRecord:
    step: int  # steps completed, counted from the job's start (a resumed attempt continues the count)
    loss: float
    seconds: float  # wall time of the step on this rank
    data_wait_seconds: float  # of which blocked waiting for the batch
    samples: int  # samples in the step, all ranks together
    mfu: float | None = None  # None where the peak FLOP rate is unknown (the CPU)

    @property
    def data_wait_fraction(self) -> float:
        return self.data_wait_seconds / self.seconds if self.seconds > 0 else 0.0

    @property
    def samples_per_second(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "data_wait_fraction": self.data_wait_fraction,
            "samples_per_second": self.samples_per_second,
        }


def textfile_name(job: str) -> str:
    """``megahour_train`` or ``megahour_train_<job>``: one file per job, so two jobs on a node don't
    overwrite each other's."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", job)
    return f"megahour_train_{safe}" if safe else "megahour_train"


@dataclass(frozen=True)
class RunTotals:
    """What this attempt has spent since it started, for rates over any window (a step's own figures
    are only the last step's): wall time of its steps and the part of it spent waiting for batches."""

    step_seconds: float = 0.0
    data_wait_seconds: float = 0.0
    running: bool = True  # False once the run closed cleanly; a killed rank leaves it True

    def add(self, record: StepRecord) -> RunTotals:
        return RunTotals(
            self.step_seconds + record.seconds,
            self.data_wait_seconds + record.data_wait_seconds,
            self.running,
        )


def families(
    record: StepRecord, job: str, now: float, totals: RunTotals | None = None
) -> list[textfile.Family]:
    """The Prometheus families of one step record; ``megahour_train_mfu`` only when it is known."""
    label = {JOB_LABEL: job}
    totals = totals or RunTotals().add(record)
    gauges = [
        ("megahour_train_step", "Last completed training step (a resume restarts at its checkpoint).",
         record.step),
        ("megahour_train_step_seconds", "Wall time of the last training step on rank 0.", record.seconds),
        ("megahour_train_data_wait_fraction", "Share of the last step spent waiting for its batch.",
         record.data_wait_fraction),
        ("megahour_train_samples_per_second", "Samples a second over all ranks, at the last step.",
         record.samples_per_second),
        ("megahour_train_loss", "Training loss at the last step (mean over ranks).", record.loss),
        ("megahour_train_mfu", "Model FLOPs utilisation of the last step (model FLOPs over dense BF16 peak).",
         record.mfu),
        ("megahour_train_updated_timestamp_seconds", "Unix time this file was written: a stale value "
         "means a stalled or dead job.", now),
    ]  # fmt: skip
    counters = [
        ("megahour_train_step_seconds_total", "Wall time of this attempt's steps on rank 0, summed.",
         totals.step_seconds),
        ("megahour_train_data_wait_seconds_total", "Of which waiting for batches: its rate over the step "
         "time's is the data-wait share over any window.", totals.data_wait_seconds),
    ]  # fmt: skip
    return [
        *(
            textfile.Family(name, help).add(value, **label)
            for name, help, value in gauges
            if value is not None
        ),
        *(textfile.Family(name, help, "counter").add(value, **label) for name, help, value in counters),
        textfile.Family(
            "megahour_train_running",
            "1 while the run writes this file; 0 once it closed cleanly. Still 1 with a stale update time: a "
            "stalled or killed job.",
        ).add(1 if totals.running else 0, **label),
    ]


class RunMetrics:
    """Rank 0's JSON-lines log and textfile; on any other rank every call does nothing."""

    def __init__(
        self,
        log_dir: Path | None,
        rank: int,
        *,
        textfile_dir: Path | None = None,
        job: str = "",
        textfile_interval_s: float = TEXTFILE_INTERVAL_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.job, self.interval, self.clock = job, textfile_interval_s, clock
        self.directory: Path | None = None
        self.textfile_dir = textfile_dir if rank == 0 else None
        self._handle: TextIO | None = None
        self._pending: StepRecord | None = None  # the newest record the textfile does not show yet
        self._last: StepRecord | None = None
        self._totals = RunTotals()
        self._written_at: float | None = None
        if rank != 0 or log_dir is None:
            return
        log_dir.mkdir(parents=True, exist_ok=True)
        self.directory = log_dir / attempt_dir_name(next_attempt_index(p.name for p in log_dir.iterdir()))
        self.directory.mkdir()
        # line-buffered append: a log, not a final file; a killed rank leaves whole lines
        self._handle = (self.directory / "metrics.jsonl").open("a", buffering=1)

    @property
    def jsonl_path(self) -> Path | None:
        return None if self.directory is None else self.directory / "metrics.jsonl"

    def event(self, name: str, **fields: Any) -> None:
        self._write({"event": name, **fields})

    def step(self, record: StepRecord) -> None:
        self._write(record.to_dict())
        if self.textfile_dir is None:
            return
        self._pending = self._last = record
        self._totals = self._totals.add(record)
        now = self.clock()
        if self._written_at is None or now - self._written_at >= self.interval:
            self._flush_textfile(now)

    def close(self, *, ended: bool = True) -> None:
        """Write the last step's textfile and close the log. Idempotent. ``ended``: the run finished,
        so the textfile says it no longer runs; False where the rank dies next (an injected failure)."""
        if self._last is not None and self._totals.running and (ended or self._pending is not None):
            self._totals = replace(self._totals, running=not ended)
            self._pending = self._last
            self._flush_textfile(self.clock())
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def _write(self, record: dict[str, Any]) -> None:
        if self._handle is not None:
            self._handle.write(json.dumps(record, sort_keys=True, default=str) + "\n")

    def _flush_textfile(self, now: float) -> None:
        if self.textfile_dir is None or self._pending is None:
            return
        textfile.write(
            self.textfile_dir, textfile_name(self.job), families(self._pending, self.job, now, self._totals)
        )
        self._pending, self._written_at = None, now


class ReadLedger:
    """One rank's ``reads/rank-<r>.jsonl``: the items of each step and what reading them cost."""

    def __init__(self, log_dir: Path | None, rank: int) -> None:
        self._handle: TextIO | None = None
        if log_dir is None:
            return
        directory = log_dir / "reads"
        directory.mkdir(parents=True, exist_ok=True)
        # line-buffered append, like metrics.jsonl: a killed rank leaves whole lines, and each attempt
        # adds after the ones before it
        self._handle = (directory / f"rank-{rank}.jsonl").open("a", buffering=1)

    def step(self, step: int, items: list[list[int]], delivery: dict[str, int]) -> None:
        if self._handle is not None:
            self._handle.write(json.dumps({"step": step, "items": items, **delivery}, sort_keys=True) + "\n")

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
