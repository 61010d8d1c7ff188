"""Where a training job stands, read from its logs: attempts, step, loss, step time, data wait.

A job's run directory (the sbatch template's ``<runtime_train_root>/<job id>``) holds
``logs/attempt-<k>/metrics.jsonl`` (one per start of the job, written by rank 0's ``RunMetrics``) and,
once the job finished, ``logs/result.json``. :func:`summarize_attempt` is pure (the lines of one log);
:func:`read_status` reads the directory. Reading needs no torch.

``logs/reads/rank-<r>.jsonl`` (every rank's read ledger, ``metrics.ReadLedger``) gives the ``reads``
summary: what the final parameters were trained on, step by step and rank by rank (the last line for a
step wins, since a resumed attempt trains the steps after its checkpoint again), whether any step is
missing or any (epoch, row) item was trained twice, a digest two runs of one job can be compared by, and
what the reads cost (pieces served by the under-store because their owner was down).

A job killed mid-write leaves a torn last line: it is skipped and counted (``torn_lines``), never
guessed at. A torn line anywhere else means the log was damaged, and is refused.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

_ATTEMPT = re.compile(r"attempt-([0-9]+)")
_RANK_LEDGER = re.compile(r"rank-([0-9]+)\.jsonl")
ENDINGS = ("end", "injected failure")


class StatusError(ValueError):
    """A run directory or log that cannot be read; the message names the path and the fix."""


@dataclass(frozen=True)
class AttemptStatus:
    attempt: int
    resumed_from: int | None = None
    first_step: int | None = None  # the first step this attempt completed
    step: int | None = None  # the last step it completed
    loss: float | None = None
    step_seconds: float | None = None  # of its last step
    step_seconds_mean: float | None = None  # over its steps
    data_wait_fraction: float | None = None  # over its steps: waiting time / step time
    data_wait_max_seconds: float | None = None  # the longest one step waited (a cache failover's stall)
    samples_per_second: float | None = None  # over its steps
    mfu: float | None = None  # of its last step, where known
    ended: str | None = None  # "end", "injected failure"; None: still running, or killed
    strategy: str | None = None
    device: str | None = None
    torn_lines: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ReadsSummary:
    ranks: int
    steps: int  # the highest step every rank recorded
    missing_steps: int  # steps below that some rank has no line for
    duplicate_items: int  # (epoch, row) items the final parameters saw more than once
    samples: int  # items trained on, all ranks, the last line of each step
    digest: str  # sha256 of every rank's (step, items), in order: equal for two runs that read alike
    lines: int  # every line, every attempt: steps trained again after a restart count again
    pieces: int
    fallbacks: int  # pieces the under-store served because their owner was down
    under_store_bytes: int
    torn_lines: int = 0

    @property
    def complete(self) -> bool:
        return self.missing_steps == 0 and self.duplicate_items == 0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "complete": self.complete}


@dataclass(frozen=True)
class TrainStatus:
    job: str
    run_dir: str
    attempts: list[AttemptStatus] = field(default_factory=list)
    finished: bool = False  # result.json is written
    result: dict[str, Any] | None = None
    reads: ReadsSummary | None = None

    @property
    def latest(self) -> AttemptStatus | None:
        return self.attempts[-1] if self.attempts else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "run_dir": self.run_dir,
            "finished": self.finished,
            "attempts": [a.to_dict() for a in self.attempts],
            "result": self.result,
            "reads": None if self.reads is None else self.reads.to_dict(),
        }


def _records(lines: Iterable[str], where: str) -> tuple[list[dict[str, Any]], int]:
    """The JSON records of a log; a torn last line is dropped and counted."""
    texts = [line for line in lines if line.strip()]
    records, torn = [], 0
    for number, text in enumerate(texts, start=1):
        try:
            records.append(json.loads(text))
        except json.JSONDecodeError:
            if number != len(texts):
                raise StatusError(
                    f"{where}: line {number} is not JSON (a damaged log); the attempt cannot be summarised"
                ) from None
            torn = 1  # the job died mid-write
    return records, torn


def summarize_attempt(attempt: int, lines: Iterable[str], where: str = "metrics.jsonl") -> AttemptStatus:
    """One attempt's figures from its ``metrics.jsonl`` lines."""
    records, torn = _records(lines, where)
    start = next((r for r in records if r.get("event") == "start"), {})
    steps = [r for r in records if "event" not in r and "step" in r]
    ended = next((r["event"] for r in reversed(records) if r.get("event") in ENDINGS), None)
    if not steps:
        return AttemptStatus(
            attempt,
            resumed_from=start.get("resumed_from"),
            ended=ended,
            strategy=(start.get("choice") or {}).get("strategy"),
            device=start.get("device"),
            torn_lines=torn,
        )
    last = steps[-1]
    seconds = sum(float(r["seconds"]) for r in steps)
    waited = sum(float(r.get("data_wait_seconds", 0.0)) for r in steps)
    samples = sum(int(r.get("samples", 0)) for r in steps)
    return AttemptStatus(
        attempt,
        resumed_from=start.get("resumed_from"),
        first_step=int(steps[0]["step"]),
        step=int(last["step"]),
        loss=last.get("loss"),
        step_seconds=last.get("seconds"),
        step_seconds_mean=seconds / len(steps),
        data_wait_fraction=waited / seconds if seconds > 0 else None,
        data_wait_max_seconds=max(float(r.get("data_wait_seconds", 0.0)) for r in steps),
        samples_per_second=samples / seconds if seconds > 0 else None,
        mfu=last.get("mfu"),
        ended=ended,
        strategy=(start.get("choice") or {}).get("strategy"),
        device=start.get("device"),
        torn_lines=torn,
    )


def summarize_reads(ranks: dict[int, Iterable[str]], where: str = "reads") -> ReadsSummary:
    """The read ledgers of every rank (their lines), as what the final parameters were trained on."""
    effective: dict[int, dict[int, list[list[int]]]] = {}
    lines = torn = pieces = fallbacks = under_store = 0
    for rank, rank_lines in sorted(ranks.items()):
        records, rank_torn = _records(rank_lines, f"{where}/rank-{rank}.jsonl")
        torn += rank_torn
        steps: dict[int, list[list[int]]] = {}
        for record in records:
            steps[int(record["step"])] = [list(map(int, item)) for item in record["items"]]
            pieces += int(record.get("pieces", 0))
            fallbacks += int(record.get("fallbacks", 0))
            under_store += int(record.get("under_store_bytes", 0))
        lines += len(records)
        effective[rank] = steps
    last = min((max(steps, default=0) for steps in effective.values()), default=0)
    missing = sum(1 for steps in effective.values() for step in range(1, last + 1) if step not in steps)
    seen: set[tuple[int, int, int]] = set()
    duplicates = samples = 0
    digest = hashlib.sha256()
    for rank, steps in sorted(effective.items()):
        for step in sorted(s for s in steps if s <= last):
            for epoch, row in steps[step]:
                samples += 1
                key = (rank, epoch, row)
                duplicates += key in seen
                seen.add(key)
            digest.update(json.dumps([rank, step, steps[step]]).encode())
    return ReadsSummary(
        ranks=len(effective),
        steps=last,
        missing_steps=missing,
        duplicate_items=duplicates,
        samples=samples,
        digest=digest.hexdigest(),
        lines=lines,
        pieces=pieces,
        fallbacks=fallbacks,
        under_store_bytes=under_store,
        torn_lines=torn,
    )


def run_dir_for(job: str, root: Path) -> Path:
    """A job id's run directory below the training root; a path is taken as the run directory."""
    given = Path(job)
    return given if given.is_dir() else root / job


def read_status(job: str, root: Path) -> TrainStatus:
    run_dir = run_dir_for(job, root)
    logs = run_dir / "logs"
    if not logs.is_dir():
        raise StatusError(
            f"{logs} does not exist: no training job {job} under {root}; pass the job id the sbatch "
            "template ran (its run directory is <root>/<job id>) and --root runtime_train_root"
        )
    found = sorted(
        (int(m.group(1)), entry)
        for entry in logs.iterdir()
        if (m := _ATTEMPT.fullmatch(entry.name)) and entry.is_dir()
    )
    attempts = []
    for index, directory in found:
        path = directory / "metrics.jsonl"
        lines = path.read_text(errors="replace").splitlines() if path.is_file() else []
        attempts.append(summarize_attempt(index, lines, str(path)))
    result_path = logs / "result.json"
    result = None
    if result_path.is_file():
        try:
            result = json.loads(result_path.read_text())
        except json.JSONDecodeError as exc:
            raise StatusError(
                f"{result_path} is not JSON ({exc}); the trainer writes it atomically, so something "
                "else wrote it: remove it and rerun the job"
            ) from None
    reads_dir = logs / "reads"
    ledgers = {
        int(m.group(1)): path.read_text(errors="replace").splitlines()
        for path in (reads_dir.iterdir() if reads_dir.is_dir() else [])
        if (m := _RANK_LEDGER.fullmatch(path.name))
    }
    reads = summarize_reads(ledgers, str(reads_dir)) if ledgers else None
    return TrainStatus(job, str(run_dir), attempts, finished=result is not None, result=result, reads=reads)


__all__ = [
    "AttemptStatus",
    "ReadsSummary",
    "StatusError",
    "TrainStatus",
    "read_status",
    "run_dir_for",
    "summarize_attempt",
    "summarize_reads",
]
