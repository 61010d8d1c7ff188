"""Run one megahour ingest step as a Slurm job from Airflow, without holding a worker slot while it runs.

``SlurmStepOperator`` (Airflow 3 task SDK) does, per task instance:

1. **toggle**: the DAG run's ``params["steps"][step]`` false -> ``AirflowSkipException``, nothing submitted;
2. **prepare**: the ``sbatch --parsable`` call with the step's own ``--cpus-per-task``/``--mem``/``--time``
   from ``STEPS[step]`` and the configured partition, so Slurm enforces the budgets. The job is named
   ``mh-ingest.<run id>.<task id>.<map index>``; when a job of that name is still PENDING/RUNNING (a retry
   after the Airflow task itself died), the operator attaches to it instead of submitting a duplicate;
3. **defer once** to ``SlurmJobTrigger``, which runs in the triggerer and holds no worker slot:
   - **stagger**: it first waits a deterministic delay in ``[0, jitter_s)`` derived from (run id, task
     id, map index), so a wide mapped fan-out does not hit slurmctld (and storage) at once;
   - **submit**: it runs the prepared ``sbatch`` (after checking again for a live job of that name, so a
     trigger restarted with the triggerer does not submit twice);
   - **wait**: it polls ``scontrol show job`` (and ``sacct`` once slurmctld has forgotten the job) with
     asyncio subprocesses until the job ends;
4. **finish**: COMPLETED with exit 0 succeeds: the trigger logs the tail of the job's output and ends the
   task itself (``TaskSuccessEvent``). Anything else resumes the task on a worker, which logs the tail and
   raises (retryable, except exit codes listed in ``final_exit_codes``).

So a step that succeeds starts one task process, not three. That matters twice over. Each task process
imports Airflow and parses the DAG (about 2 CPU seconds on the Airflow host, taken from the steps on a
small cluster). And every resume after a deferral can race the scheduler: in Airflow 3.3 the executor's
late "success" for the process that deferred, seen after the trigger has already re-queued the task, is
taken for an external kill and the task goes up for retry (apache/airflow#67287, #72716), which costs a
retry delay and a rerun of the step.

``on_kill`` (worker side) and ``SlurmJobTrigger.on_kill`` (triggerer side, when a user marks the deferred
task failed/success or clears it) cancel the job with ``scancel``.

The Slurm part lives in ``megahour.slurm``: ``jobs`` (job states, ``JobStatus``, the exact sbatch/squeue/
scontrol/sacct/scancel calls and their parsers; pure), ``client.SlurmClient`` (the worker's blocking calls:
live jobs by name, cancel) and ``async_client.AsyncSlurmClient`` (the triggerer's: submit, live jobs by
name, the scontrol-then-sacct query, cancel). What stays here is Airflow's: step toggles, the stagger and
poll delays, the run's folders, job names and log paths, the step's command, and the operator and trigger.
The pure parts are plain functions at the top of this module, unit-tested without Airflow or Slurm.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import shlex
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException
from airflow.triggers.base import BaseTrigger, TaskSuccessEvent, TriggerEvent

from megahour.ingest.runfiles import batch_count, safe_run_id
from megahour.ingest.steps import STEPS, StepSpec, spec
from megahour.slurm.async_client import AsyncSlurmClient
from megahour.slurm.client import SlurmClient, SlurmQueryError
from megahour.slurm.jobs import (
    JOB_CALL_TIMEOUT_S,
    SUBMIT_FAILED_STATE,
    UNKNOWN_STATE,
    BatchJob,
    JobStatus,
    LiveJob,
    sbatch_args,
)

JOB_NAME_PREFIX = "mh-ingest"
# How long past its own time limit a step may stay unfinished (queued, held) before the task gives up.
QUEUE_ALLOWANCE = timedelta(hours=1)
FIRST_POLL_S = 0.25


# Pure helpers ------------------------------------------------------------------------------------------


def step_enabled(params: Mapping[str, Any] | None, step: str) -> bool:
    """The DAG run's on/off switch for ``step`` (``params["steps"][step]``, default on)."""
    toggles = (params or {}).get("steps") or {}
    return bool(toggles.get(step, True))


def stagger_delay(run_id: str, task_id: str, map_index: int, jitter_s: float) -> float:
    """A delay in ``[0, jitter_s)`` that is the same for the same (run, task, map index) on every host."""
    jitter = float(jitter_s or 0.0)
    if jitter <= 0:
        return 0.0
    digest = hashlib.sha256(f"{run_id}\0{task_id}\0{map_index}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 * jitter


def poll_delay(waits: int, interval: float, first: float = FIRST_POLL_S) -> float:
    """The wait before the next status query of one job, when it has been waited for ``waits`` times.

    Doubling from ``first`` up to ``interval``: most steps' jobs end within a second or two, and every
    step boundary on a run's critical path waits for this poll, while a long job costs one query every
    ``interval`` seconds.
    """
    return min(float(interval), first * 2 ** min(waits, 16))


def run_dir_for(runs: str | Path, run_id: str) -> Path:
    """The run's working folder on the shared filesystem: ``<runs>/<sanitized run id>``."""
    return Path(runs) / safe_run_id(run_id)


def job_name(run_id: str, task_id: str, map_index: int) -> str:
    """``mh-ingest.<run id>.<task id>.<map index>``: unique per task instance, stable across its tries."""
    return f"{JOB_NAME_PREFIX}.{safe_run_id(run_id)}.{task_id}.{map_index}"


def log_stem(step: str, batch: int | None) -> str:
    return step if batch is None else f"{step}-{batch}"


def log_path(run_dir: str | Path, step: str, batch: int | None, try_number: int) -> Path:
    """Where the job's stdout and stderr go: ``<run_dir>/logs/<step>[-<batch>].try<N>.log``."""
    return Path(run_dir) / "logs" / f"{log_stem(step, batch)}.try{try_number}.log"


def latest_log(run_dir: str | Path, step: str, batch: int | None) -> Path | None:
    """The output file of the most recent try of a step (used when attaching to an earlier try's job)."""
    pattern = re.compile(rf"{re.escape(log_stem(step, batch))}\.try(\d+)\.log")
    found = []
    for path in (Path(run_dir) / "logs").glob(f"{log_stem(step, batch)}.try*.log"):
        match = pattern.fullmatch(path.name)
        if match:
            found.append((int(match.group(1)), path))
    return max(found)[1] if found else None


def step_command(
    megahour: str,
    step: str,
    run_dir: str | Path,
    batch: int | None = None,
    params: Mapping[str, Any] | None = None,
) -> list[str]:
    """``megahour ingest step NAME --run-dir DIR [--batch I] [--params JSON]`` as an argument list."""
    argv = [megahour, "ingest", "step", step, "--run-dir", str(run_dir)]
    if batch is not None:
        argv += ["--batch", str(int(batch))]
    if params is not None:
        argv += ["--params", json.dumps(dict(params), sort_keys=True, separators=(",", ":"), default=str)]
    return argv


def step_job(
    step: StepSpec,
    *,
    partition: str,
    name: str,
    output: str | Path,
    workdir: str | Path,
    command: Sequence[str],
) -> BatchJob:
    """The Slurm job for one step: its resource budget becomes the job's limits."""
    return BatchJob(
        name=name,
        partition=partition,
        cpus=step.cpus,
        mem_mb=step.mem_mb,
        time_limit_min=step.time_limit_min,
        workdir=workdir,
        output=output,
        command=list(command),
    )


def tail(path: str | Path | None, lines: int = 40, max_bytes: int = 64 * 1024) -> list[str]:
    """The last ``lines`` lines of a (possibly large) log file; [] when it cannot be read."""
    if not path:
        return []
    try:
        with open(path, "rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(0, size - max_bytes))
            data = handle.read()
    except OSError:
        return []
    return data.decode(errors="replace").splitlines()[-lines:]


# Slurm calls ------------------------------------------------------------------------------------------


def slurm_client() -> SlurmClient:
    """The worker's Slurm calls, with the job calls' timeout (built per call: today's PATH and env)."""
    return SlurmClient(timeout=JOB_CALL_TIMEOUT_S)


def airflow_error(exc: SlurmQueryError) -> AirflowException:
    """A failed Slurm call as the task reports it: the exit status and stderr, or why it did not run."""
    if exc.returncode is None:
        return AirflowException(f"`{shlex.join(exc.command)}` could not run: {exc.__cause__}")
    return AirflowException(f"{exc.command[0]} exited {exc.returncode}: {exc.stderr.strip()}")


# Airflow -----------------------------------------------------------------------------------------------


class SlurmJobTrigger(BaseTrigger):
    """Stagger, submit and wait for one step's Slurm job in the triggerer; fire once when it has ended.

    ``submit`` is the prepared ``sbatch --parsable`` call, run after ``delay_s`` seconds (the stagger);
    ``job_id`` instead follows a job that already exists (a retry attaching to an earlier try's job).
    Before submitting, the trigger looks for a live job named ``job_name`` and follows it instead, so a
    trigger rebuilt after a triggerer restart never submits twice.

    A job that succeeded ends the task from here (``TaskSuccessEvent``, with the job's output tail in this
    trigger's log, which is part of the task's log). Otherwise it fires ``JobStatus.to_dict()`` and the
    task resumes to raise: a failed job, an sbatch that failed (state ``SUBMIT_FAILED``), or, after
    ``max_misses`` consecutive polls that could not tell the job's state, state ``UNKNOWN`` with the last
    problem (fail closed; retries decide). ``log`` is echoed back as ``stdout`` when Slurm does not report
    the output file (sacct does not), so the resumed task finds the job's output.
    """

    def __init__(
        self,
        job_id: str | None = None,
        poll_interval: float = 2.0,
        log: str | None = None,
        max_misses: int = 30,
        log_tail_lines: int = 40,
        submit: Sequence[str] | None = None,
        job_name: str | None = None,
        delay_s: float = 0.0,
    ) -> None:
        super().__init__()
        if (job_id is None) == (submit is None):
            raise ValueError("SlurmJobTrigger needs exactly one of job_id (follow) and submit (sbatch argv)")
        self.job_id = None if job_id is None else str(job_id)
        self.poll_interval = float(poll_interval)
        self.log_file = log
        self.max_misses = int(max_misses)
        self.log_tail_lines = int(log_tail_lines)
        self.submit = None if submit is None else [str(arg) for arg in submit]
        self.job_name = job_name
        self.delay_s = float(delay_s)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "job_id": self.job_id,
                "poll_interval": self.poll_interval,
                "log": self.log_file,
                "max_misses": self.max_misses,
                "log_tail_lines": self.log_tail_lines,
                "submit": self.submit,
                "job_name": self.job_name,
                "delay_s": self.delay_s,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        slurm = AsyncSlurmClient()
        if self.job_id is None:
            if self.delay_s > 0:
                self.log.info("staggered start: waiting %.2fs before sbatch", self.delay_s)
                await asyncio.sleep(self.delay_s)
            job_id, problem = await self._submit(slurm)
            if job_id is None:
                yield TriggerEvent(
                    JobStatus("", SUBMIT_FAILED_STATE, stdout=self.log_file, detail=problem).to_dict()
                )
                return
            self.job_id = job_id
        misses = polls = 0
        while True:
            answer = await slurm.query_job(self.job_id)
            status, problem = answer.value, answer.problem
            polls += 1
            if status is None:
                misses += 1
                self.log.warning("job %s: %s (%d/%d)", self.job_id, problem, misses, self.max_misses)
                if misses >= self.max_misses:
                    status = JobStatus(self.job_id, UNKNOWN_STATE, detail=problem)
            else:
                misses = 0
            if status is not None and status.finished:
                if not status.stdout and self.log_file:
                    status = JobStatus(**{**status.to_dict(), "stdout": self.log_file})
                if status.succeeded:
                    lines = tail(status.stdout, self.log_tail_lines)
                    if lines:
                        self.log.info("last %d lines of %s:\n%s", len(lines), status.stdout, "\n".join(lines))
                    self.log.info("%s", status.describe())
                    yield TaskSuccessEvent()
                    return
                yield TriggerEvent(status.to_dict())
                return
            await asyncio.sleep(poll_delay(polls - 1, self.poll_interval))

    async def _submit(self, slurm: AsyncSlurmClient | None = None) -> tuple[str | None, str]:
        """(job id, "") once submitted or attached; (None, why) when it could not be."""
        assert self.submit is not None
        slurm = slurm or AsyncSlurmClient()
        if self.job_name:
            live = await slurm.live_jobs(self.job_name)
            if live.value is None:
                # Fail closed: not knowing whether the job runs already must not submit a duplicate.
                return None, live.problem
            if live.value:
                job_id, state = live.value[-1]
                self.log.info("attaching to Slurm job %s (%s), named %s", job_id, state, self.job_name)
                return job_id, ""
        self.log.info("submitting: %s", shlex.join(self.submit))
        submitted = await slurm.submit(self.submit)
        if submitted.value is None:
            return None, submitted.problem
        self.log.info("submitted Slurm job %s; output in %s", submitted.value, self.log_file)
        return submitted.value, ""

    async def on_kill(self) -> None:
        # Before the job id is known (still staggering or submitting), its unique name finds it.
        if self.job_id:
            problem = await AsyncSlurmClient().cancel(self.job_id)
        elif self.job_name:
            problem = await AsyncSlurmClient().cancel(name=self.job_name)
        else:
            return
        if problem:
            self.log.warning("%s", problem)


def step_doc(step: StepSpec) -> str:
    kind = "critical" if step.critical else "non-critical"
    decides = (
        "a failure fails the run (summary exits non-zero)"
        if step.critical
        else "a failure is reported by summary and does not fail the run"
    )
    return (
        f"**{kind}** ingest step `{step.name}`: {step.doc}.\n\n"
        f"Slurm job: {step.cpus} CPU, {step.mem_mb} MB, {step.time_limit_min} min; {decides}."
    )


class SlurmStepOperator(BaseOperator):
    """One ``megahour ingest step`` as a Slurm job; see the module docstring for the life cycle.

    :param step: a name in ``STEPS``; its resources become the job's Slurm limits.
    :param batch: the batch index for per-batch steps (templated: a mapped task group's argument).
    :param partition: the Slurm partition (``IngestConfig.partition``).
    :param megahour: the ``megahour`` command on the compute nodes.
    :param runs: the folder holding per-run working dirs (``IngestConfig.runs``).
    :param default_jitter_s: the stagger when the run's params carry no ``jitter_s``.
    :param final_exit_codes: job exit codes that fail the task without retries (summary's verdict).
    :param deferrable: False waits for the job in the task process, holding a worker slot, instead of
        deferring. For a short step whose return value is needed: only a task that returns on a worker
        pushes an XCom that mapping can use, and a resume after deferring can race the scheduler (see the
        module docstring).
    """

    template_fields: Sequence[str] = ("batch",)
    ui_color = "#dbe9f6"

    def __init__(
        self,
        *,
        step: str,
        partition: str,
        megahour: str,
        runs: str,
        batch: Any = None,
        default_jitter_s: float = 0.0,
        poll_interval_s: float = 2.0,  # the longest wait between polls (they start at FIRST_POLL_S)
        deferrable: bool = True,
        final_exit_codes: Iterable[int] = (),
        log_tail_lines: int = 40,
        **kwargs: Any,
    ) -> None:
        step_spec = spec(step)
        kwargs.setdefault("doc_md", step_doc(step_spec))
        super().__init__(**kwargs)
        self.step = step
        self.batch = batch
        self.partition = partition
        self.megahour = megahour
        self.runs = runs
        self.default_jitter_s = float(default_jitter_s)
        self.poll_interval_s = float(poll_interval_s)
        self.final_exit_codes = tuple(int(code) for code in final_exit_codes)
        self.log_tail_lines = int(log_tail_lines)
        self.deferrable = bool(deferrable)
        self._job_id: str | None = None
        self._job_name: str | None = None

    @property
    def critical(self) -> bool:
        return STEPS[self.step].critical

    # Life cycle ----------------------------------------------------------------------------------------

    def execute(self, context: Any) -> Any:
        params = context.get("params") or {}
        # summary is the DAG's only leaf and decides the run: a skipped leaf would count as success.
        if self.step != "summary" and not step_enabled(params, self.step):
            raise AirflowSkipException(f"step {self.step} is switched off in this run's params")
        ti = context["ti"]
        run_id = context["run_id"]
        run_dir = run_dir_for(self.runs, run_id)
        # The job's --output folder must exist before the job starts, or Slurm fails it silently.
        (run_dir / "logs").mkdir(parents=True, exist_ok=True)
        name = job_name(run_id, ti.task_id, ti.map_index)
        batch = self._batch_index()
        follow: dict[str, Any]
        live = self._live_jobs(name)
        if live:
            job_id, state = live[-1]
            if len(live) > 1:
                pairs = [tuple(job) for job in live]
                self.log.warning("several live jobs named %s: %s; following the newest", name, pairs)
            output = latest_log(run_dir, self.step, batch)
            self.log.info("attaching to Slurm job %s (%s, named %s) from an earlier try", job_id, state, name)
            self._job_id = job_id
            follow, delay = {"job_id": job_id}, 0.0
        else:
            output = log_path(run_dir, self.step, batch, ti.try_number)
            step_params = params if self.step == "discover" else None
            command = step_command(self.megahour, self.step, run_dir, batch, step_params)
            argv = sbatch_args(
                step_job(
                    STEPS[self.step],
                    partition=self.partition,
                    name=name,
                    output=output,
                    workdir=run_dir,
                    command=command,
                )
            )
            jitter = params.get("jitter_s")
            jitter = self.default_jitter_s if jitter is None else float(jitter)
            delay = stagger_delay(run_id, ti.task_id, ti.map_index, jitter)
            self.log.info("deferring: sbatch in %.2fs (jitter_s=%g): %s", delay, jitter, shlex.join(argv))
            follow = {"submit": argv, "job_name": name, "delay_s": delay}
        self._job_name = name
        trigger = SlurmJobTrigger(
            poll_interval=self.poll_interval_s,
            log=str(output) if output else None,
            log_tail_lines=self.log_tail_lines,
            **follow,
        )
        if not self.deferrable:
            return self.complete(context, self._wait_here(trigger))
        self.defer(
            trigger=trigger,
            method_name="complete",
            # A job that never ends (held, its partition down) must not leave the run waiting forever.
            timeout=timedelta(seconds=delay, minutes=spec(self.step).time_limit_min) + QUEUE_ALLOWANCE,
        )

    def complete(self, context: Any, event: Mapping[str, Any] | str | None = None) -> Any:
        if event == "success":
            # `airflow dags test` resumes the task even on the trigger's TaskSuccessEvent (whose payload is
            # the state); the scheduler's triggerer ends the task instead and never gets here.
            return self._result(context)
        if not isinstance(event, Mapping) or not event:
            raise AirflowException(f"resumed without a Slurm job event ({event!r})")
        status = JobStatus.from_dict(event)
        self._job_id = status.job_id or None
        lines = tail(status.stdout, self.log_tail_lines)
        if lines:
            self.log.info("last %d lines of %s:\n%s", len(lines), status.stdout, "\n".join(lines))
        else:
            self.log.info("no job output to show (%s)", status.stdout or "output file unknown")
        if status.succeeded:
            self.log.info("%s", status.describe())
            return self._result(context)
        if status.exit_code in self.final_exit_codes:
            raise AirflowFailException(status.describe())
        raise AirflowException(status.describe())

    def on_kill(self) -> None:
        if self._job_id:
            self.log.info("cancelling Slurm job %s", self._job_id)
            self._cancel(self._job_id)
        elif self._job_name:
            self.log.info("cancelling Slurm jobs named %s", self._job_name)
            self._cancel(name=self._job_name)

    # Helpers -------------------------------------------------------------------------------------------

    def _batch_index(self) -> int | None:
        if self.batch is None or self.batch == "":
            return None
        return int(self.batch)

    def _live_jobs(self, name: str) -> list[LiveJob]:
        try:
            return slurm_client().live_jobs(name)
        except SlurmQueryError as exc:
            # Fail closed: not knowing whether a job is running must not submit a duplicate.
            raise airflow_error(exc) from exc

    def _cancel(self, job_id: str | None = None, *, name: str | None = None) -> None:
        try:
            slurm_client().cancel(job_id, name=name)
        except SlurmQueryError as exc:
            if exc.returncode is None:  # scancel could not run; its own refusal (job gone) is no error
                raise airflow_error(exc) from exc

    def _wait_here(self, trigger: SlurmJobTrigger) -> Mapping[str, Any] | str:
        """Run the trigger in this task process (``deferrable=False``); its event as ``complete`` takes it."""

        async def first_event() -> TriggerEvent | None:
            return await anext(trigger.run(), None)

        event = asyncio.run(first_event())
        self._job_id = trigger.job_id
        if isinstance(event, TaskSuccessEvent):
            return "success"
        return event.payload if event is not None else {}

    def _result(self, context: Any) -> Any:
        """What the task returns (its XCom): plan returns the batch indexes the DAG maps over."""
        if self.step == "plan":
            return list(range(batch_count(run_dir_for(self.runs, context["run_id"]))))
        return None
