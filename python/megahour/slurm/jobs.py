"""Batch jobs in Slurm 22.05: their states, the exact job commands, and parsers for what those print.

Pure: no I/O. ``client`` (blocking, for a worker) and ``async_client`` (asyncio, for the Airflow
triggerer) run these commands; a submitted job is followed by ``scontrol show job`` while slurmctld
still knows it, then by ``sacct``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

# How long one job command (sbatch, squeue, scontrol, sacct, scancel) may run.
JOB_CALL_TIMEOUT_S = 60.0

# Job states (Slurm 22.05 long names) after which the job never runs again.
TERMINAL_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "REVOKED",
        "TIMEOUT",
    }
)
# What squeue is asked for when looking for a job to attach to (a live job of the same name).
# Not COMPLETING: a job on its way out (say, cancelled by on_kill) must not be adopted; resubmitting is
# idempotent.
ATTACHABLE_STATES = ("PENDING", "RUNNING", "CONFIGURING", "SUSPENDED", "REQUEUED")
UNKNOWN_STATE = "UNKNOWN"
# The job could not be submitted (sbatch failed); ours, not Slurm's.
SUBMIT_FAILED_STATE = "SUBMIT_FAILED"
# scontrol's stderr for a job slurmctld no longer knows (ended more than MinJobAge ago): ask sacct.
_INVALID_JOB = "invalid job id"


@dataclass(frozen=True)
class BatchJob:
    """One single-task batch job: where it runs, its resource limits, and the command it wraps."""

    name: str
    partition: str
    cpus: int
    mem_mb: int
    time_limit_min: int
    workdir: str | Path
    output: str | Path  # stdout and stderr
    command: Sequence[str]


class LiveJob(NamedTuple):
    job_id: str
    state: str


@dataclass(frozen=True)
class JobStatus:
    job_id: str
    state: str
    exit_code: int | None = None
    signal: int | None = None
    stdout: str | None = None  # the job's output file, where Slurm told us
    detail: str = ""

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL_STATES or self.state in (UNKNOWN_STATE, SUBMIT_FAILED_STATE)

    @property
    def succeeded(self) -> bool:
        return self.state == "COMPLETED" and self.exit_code == 0 and not self.signal

    def describe(self) -> str:
        if self.state == SUBMIT_FAILED_STATE:
            return f"the Slurm job could not be submitted: {self.detail}"
        code = "?" if self.exit_code is None else f"{self.exit_code}:{self.signal or 0}"
        extra = f" ({self.detail})" if self.detail else ""
        return f"Slurm job {self.job_id} ended {self.state}, exit code {code}{extra}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any]) -> JobStatus:
        return cls(
            job_id=str(payload["job_id"]),
            state=str(payload.get("state") or UNKNOWN_STATE),
            exit_code=payload.get("exit_code"),
            signal=payload.get("signal"),
            stdout=payload.get("stdout"),
            detail=str(payload.get("detail") or ""),
        )


# Commands ----------------------------------------------------------------------------------------------


def sbatch_args(job: BatchJob) -> list[str]:
    """The sbatch call for one job: its budget becomes Slurm limits, its command one ``--wrap`` line."""
    return [
        "sbatch",
        "--parsable",
        "--job-name",
        job.name,
        "--partition",
        job.partition,
        "--nodes",
        "1",
        "--ntasks",
        "1",
        "--cpus-per-task",
        str(job.cpus),
        "--mem",
        f"{job.mem_mb}M",
        "--time",
        str(job.time_limit_min),
        "--chdir",
        str(job.workdir),
        "--output",
        str(job.output),
        "--wrap",
        shlex.join(job.command),
    ]


@dataclass(frozen=True)
class ScriptJob:
    """A batch script submitted as it is (the training template), with its arguments and sbatch options."""

    script: str
    script_args: tuple[str, ...] = ()
    name: str | None = None
    nodes: int | None = None
    ntasks_per_node: int | None = None
    time: str | None = None
    partition: str | None = None
    # added to the submitter's environment (``--export=ALL,...``); sbatch splits the list on commas
    export: Mapping[str, str] | None = None
    extra: tuple[str, ...] = ()  # more sbatch options, passed as given


def script_sbatch_args(job: ScriptJob) -> list[str]:
    """The ``sbatch --parsable`` call for a batch script: options, then the script and its arguments."""
    argv = ["sbatch", "--parsable"]
    for flag, value in (
        ("--job-name", job.name),
        ("--nodes", job.nodes),
        ("--ntasks-per-node", job.ntasks_per_node),
        ("--time", job.time),
        ("--partition", job.partition),
    ):
        if value is not None:
            argv.append(f"{flag}={value}")
    export = dict(job.export or {})
    bad = [name for name, value in export.items() if "," in name or "," in value or "\n" in value]
    if bad:
        raise ValueError(f"--export cannot carry {bad[0]}: its value holds a comma or newline")
    if export:
        argv.append("--export=" + ",".join(["ALL", *(f"{k}={v}" for k, v in sorted(export.items()))]))
    return [*argv, *job.extra, job.script, *job.script_args]


def check_sbatch_args(argv: Sequence[str]) -> None:
    """Refuse anything but a prepared ``sbatch --parsable`` call: submitting runs only sbatch."""
    if list(argv[:2]) != ["sbatch", "--parsable"]:
        raise ValueError(f"not an `sbatch --parsable` call: {list(argv)!r}")


def squeue_by_name_args(name: str) -> list[str]:
    return [
        "squeue",
        "--noheader",
        "--name",
        name,
        "--states",
        ",".join(ATTACHABLE_STATES),
        "--format",
        "%i|%T",
    ]


def scontrol_job_args(job_id: str) -> list[str]:
    return ["scontrol", "show", "job", "--oneliner", job_id]


def sacct_args(job_id: str) -> list[str]:
    return [
        "sacct",
        "--noheader",
        "--parsable2",
        "--allocations",
        "--jobs",
        job_id,
        "--format",
        "JobID,State,ExitCode",
    ]


def scancel_args(job_id: str | None = None, *, name: str | None = None) -> list[str]:
    """``scancel ID``, or ``scancel --name NAME`` for every job of that name (before its id is known)."""
    if (job_id is None) == (name is None):
        raise ValueError("scancel needs exactly one of a job id and a job name")
    return ["scancel", job_id] if job_id is not None else ["scancel", "--name", name or ""]


# Parsers -----------------------------------------------------------------------------------------------


def parse_sbatch_job_id(stdout: str) -> str:
    """``sbatch --parsable`` prints ``<job id>`` or ``<job id>;<cluster>``."""
    line = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    job_id = line.split(";", 1)[0].strip()
    if not job_id.isdigit():
        raise ValueError(f"sbatch printed no job id: {stdout!r}")
    return job_id


def parse_squeue_jobs(stdout: str) -> list[LiveJob]:
    """``squeue --format %i|%T`` lines as (job id, state), oldest job first."""
    jobs = []
    for line in stdout.splitlines():
        job_id, sep, state = line.strip().partition("|")
        if sep and job_id.isdigit():
            jobs.append(LiveJob(job_id, normalize_state(state)))
    return sorted(jobs, key=lambda job: int(job.job_id))


def normalize_state(raw: str) -> str:
    """``CANCELLED by 1000`` / ``CANCELLED+`` / ``completed`` -> ``CANCELLED`` / ``COMPLETED``."""
    words = raw.strip().split()
    return words[0].rstrip("+").upper() if words else UNKNOWN_STATE


def parse_exit_code(raw: str) -> tuple[int | None, int | None]:
    """Slurm's ``<exit status>:<signal>``."""
    status, _, signal = raw.strip().partition(":")
    try:
        return int(status), int(signal or 0)
    except ValueError:
        return None, None


_FIELD = re.compile(r"(?:^|\s)(JobId|JobState|ExitCode|StdOut)=(\S*)")


def parse_scontrol_job(text: str) -> JobStatus | None:
    """``scontrol show job --oneliner ID``: state, exit code and output file (None if not understood)."""
    fields = dict(_FIELD.findall(text))
    if "JobId" not in fields or "JobState" not in fields:
        return None
    exit_code, signal = parse_exit_code(fields.get("ExitCode", ""))
    stdout = fields.get("StdOut") or None
    return JobStatus(fields["JobId"], normalize_state(fields["JobState"]), exit_code, signal, stdout)


def job_forgotten(scontrol_stderr: str) -> bool:
    """Whether a failed ``scontrol show job`` says slurmctld no longer knows the job (sacct may)."""
    return _INVALID_JOB in scontrol_stderr.lower()


def parse_sacct(text: str, job_id: str) -> JobStatus | None:
    """``sacct --parsable2 --allocations --format JobID,State,ExitCode``: the job's own line, if any."""
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 3 and parts[0] == job_id:
            exit_code, signal = parse_exit_code(parts[2])
            return JobStatus(job_id, normalize_state(parts[1]), exit_code, signal)
    return None
