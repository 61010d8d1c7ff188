"""The ingestion steps: what each needs from Slurm, whether it is critical, and how a run's outcome
follows from the steps' results. Pure: no I/O.

The resource budgets are what the Slurm operator asks for (``--cpus-per-task``, ``--mem``, ``--time``),
so the engine enforces them: a step over its memory is killed by Slurm, and steps only start when their
CPUs are free. Critical steps decide the run; non-critical ones (previews, QC) are reported and never
fail it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class StepSpec:
    name: str
    critical: bool
    per_batch: bool
    cpus: int
    mem_mb: int
    time_limit_min: int
    doc: str


STEPS: dict[str, StepSpec] = {
    spec.name: spec
    for spec in (
        StepSpec("discover", True, False, 1, 512, 10, "list raw episodes in the landing zone"),
        StepSpec("plan", True, False, 1, 512, 10, "bin-pack the files into byte-balanced batches"),
        StepSpec("validate", True, True, 1, 1024, 30, "read every raw episode; quarantine corrupt ones"),
        StepSpec("transcode", True, True, 1, 2048, 120, "write the tuned container (H.264, topic groups)"),
        StepSpec("upload", True, True, 1, 512, 60, "copy tuned episodes into storage, atomically"),
        StepSpec("register", True, True, 1, 512, 30, "upsert the episodes' warehouse rows"),
        StepSpec("previews", False, True, 1, 512, 30, "first-frame thumbnails per camera"),
        StepSpec("qc", False, True, 1, 512, 30, "per-episode QC metrics (frame gaps, rates, sizes)"),
        StepSpec("summary", True, False, 1, 512, 10, "report the run; fail it if a critical step failed"),
    )
}
BATCH_STEPS = tuple(name for name, spec in STEPS.items() if spec.per_batch)
CRITICAL_BATCH_CHAIN = ("validate", "transcode", "upload", "register")


class UnknownStepError(ValueError):
    pass


def spec(name: str) -> StepSpec:
    try:
        return STEPS[name]
    except KeyError:
        raise UnknownStepError(f"unknown step {name!r}; the steps are {', '.join(STEPS)}") from None


def result_name(step: str, batch: int | None) -> str:
    """The file name a step's result is kept under in the run's steps/ folder."""
    return f"{step}.json" if batch is None else f"{step}-{batch}.json"


def enabled_steps(toggles: Mapping[str, bool] | None) -> dict[str, bool]:
    """Every step's on/off switch for one run; unknown names are refused (a typo must not pass)."""
    toggles = dict(toggles or {})
    unknown = sorted(set(toggles) - set(STEPS))
    if unknown:
        raise UnknownStepError(f"steps {', '.join(unknown)} do not exist; the steps are {', '.join(STEPS)}")
    for name in ("summary",):
        if toggles.get(name) is False:
            raise UnknownStepError("the summary step cannot be switched off: it decides the run's outcome")
    return {name: bool(toggles.get(name, True)) for name in STEPS}


@dataclass(frozen=True)
class StepOutcome:
    step: str
    batch: int | None
    status: str  # "ok", "failed", "off"
    critical: bool


@dataclass(frozen=True)
class RunOutcome:
    succeeded: bool
    steps: tuple[StepOutcome, ...]

    @property
    def critical_failures(self) -> list[StepOutcome]:
        return [s for s in self.steps if s.status == "failed" and s.critical]

    @property
    def noncritical_failures(self) -> list[StepOutcome]:
        return [s for s in self.steps if s.status == "failed" and not s.critical]


def run_outcome(enabled: Mapping[str, bool], batches: int | None, finished: set[str]) -> RunOutcome:
    """Judge a run from the result files its steps left (``finished`` holds their names).

    A step that is on and left no result failed (it raised, was killed, or never ran because an upstream
    step failed). ``batches`` is None when planning never finished; the per-batch steps then count as one
    failed step each.
    """
    outcomes = []
    for name, step in STEPS.items():
        if name == "summary":
            continue
        # batches None: planning never finished (each per-batch step counts once, as failed);
        # 0: an empty landing zone, so there are no per-batch steps at all.
        indexes: list[int | None] = list(range(batches)) if step.per_batch and batches is not None else [None]
        for batch in indexes:
            if not enabled.get(name, True):
                status = "off"
            else:
                status = "ok" if result_name(name, batch) in finished else "failed"
            outcomes.append(StepOutcome(name, batch, status, step.critical))
    ok = not any(o.status == "failed" and o.critical for o in outcomes)
    return RunOutcome(ok, tuple(outcomes))
