"""Slurm's job commands from asyncio (the Airflow triggerer): find, submit, follow and cancel a job.

Nothing here raises for a Slurm failure: a trigger must go on and decide for itself, failing closed. So
every call answers with what it learnt, or with no value and the problem in the words a task log shows.
A command that could not start or ran past its timeout counts as exit status -1, its stderr saying why.
"""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from megahour.slurm.client import slurm_env
from megahour.slurm.jobs import (
    JOB_CALL_TIMEOUT_S,
    JobStatus,
    LiveJob,
    check_sbatch_args,
    job_forgotten,
    parse_sacct,
    parse_sbatch_job_id,
    parse_scontrol_job,
    parse_squeue_jobs,
    sacct_args,
    scancel_args,
    scontrol_job_args,
    squeue_by_name_args,
)

T = TypeVar("T")


@dataclass(frozen=True)
class Completed:
    """A finished command: its exit status (-1: it did not run to the end) and its output."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


# Same call shape as run_async; tests inject a fake.
AsyncRunner = Callable[[Sequence[str], float, Mapping[str, str]], Awaitable[Completed]]


async def run_async(argv: Sequence[str], timeout: float, env: Mapping[str, str]) -> Completed:
    """Run ``argv`` without blocking the event loop; a missing binary or a timeout is exit status -1."""
    args = tuple(str(arg) for arg in argv)
    try:
        proc = await asyncio.create_subprocess_exec(
            *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=dict(env)
        )
    except OSError as exc:
        return Completed(args, -1, "", f"could not start {args[0]}: {exc}")
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return Completed(args, -1, "", f"{args[0]} timed out after {timeout:g}s")
    return Completed(args, proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace"))


@dataclass(frozen=True)
class Answer(Generic[T]):
    """What a call learnt (``value``), or None and why not (``problem``)."""

    value: T | None = None
    problem: str = ""


class AsyncSlurmClient:
    """squeue/sbatch/scontrol/sacct/scancel for one job, each with a timeout; answers, never raises."""

    def __init__(
        self,
        runner: AsyncRunner = run_async,
        timeout: float = JOB_CALL_TIMEOUT_S,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.runner = runner
        self.timeout = timeout
        self.env = slurm_env(env)

    async def _run(self, argv: Sequence[str]) -> Completed:
        return await self.runner(list(argv), self.timeout, self.env)

    async def live_jobs(self, name: str) -> Answer[list[LiveJob]]:
        """The jobs named ``name`` that are live, oldest first; no value when squeue failed."""
        done = await self._run(squeue_by_name_args(name))
        if done.returncode != 0:
            return Answer(problem=f"squeue exited {done.returncode}: {done.stderr.strip()[:300]}")
        return Answer(parse_squeue_jobs(done.stdout))

    async def submit(self, argv: Sequence[str]) -> Answer[str]:
        """Run a prepared ``sbatch --parsable`` call (``jobs.sbatch_args``); the new job's id."""
        try:
            check_sbatch_args(argv)
        except ValueError as exc:
            return Answer(problem=str(exc))
        done = await self._run(argv)
        if done.returncode != 0:
            return Answer(problem=f"sbatch exited {done.returncode}: {done.stderr.strip()[:300]}")
        try:
            return Answer(parse_sbatch_job_id(done.stdout))
        except ValueError as exc:
            return Answer(problem=str(exc))

    async def query_job(self, job_id: str) -> Answer[JobStatus]:
        """The job's status from slurmctld, or from accounting once slurmctld has forgotten it.

        No value means "could not tell this time", and the problem says why.
        """
        done = await self._run(scontrol_job_args(job_id))
        if done.returncode == 0:
            status = parse_scontrol_job(done.stdout)
            if status is None:
                return Answer(problem=f"scontrol output not understood: {done.stdout.strip()[:200]}")
            return Answer(status)
        if not job_forgotten(done.stderr):
            return Answer(problem=f"scontrol failed ({done.returncode}): {done.stderr.strip()[:200]}")
        done = await self._run(sacct_args(job_id))
        if done.returncode != 0:
            return Answer(
                problem=f"scontrol no longer knows job {job_id} and sacct failed ({done.returncode}): "
                f"{done.stderr.strip()[:200]}"
            )
        status = parse_sacct(done.stdout, job_id)
        return Answer(status) if status else Answer(problem=f"job {job_id} is in neither scontrol nor sacct")

    async def cancel(self, job_id: str | None = None, *, name: str | None = None) -> str:
        """``scancel`` one job by id, or every job named ``name``: "" once done, else the problem."""
        argv = scancel_args(job_id, name=name)
        done = await self._run(argv)
        if done.returncode != 0:
            return f"{shlex.join(argv)} failed ({done.returncode}): {done.stderr.strip()}"
        return ""
