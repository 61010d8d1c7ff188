"""SlurmStepOperator and SlurmJobTrigger: the pure helpers, and the execute/submit/complete paths against a
fake Slurm (sbatch, squeue, scontrol, sacct, scancel as one small script on PATH that records its calls).
The Slurm adapter's own parsers and calls are tested in tests/slurm.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from airflow.sdk.exceptions import (
    AirflowException,
    AirflowFailException,
    AirflowSkipException,
    TaskDeferred,
)
from airflow.triggers.base import TaskSuccessEvent

from megahour.ingest import slurm_operator as so
from megahour.ingest.steps import STEPS
from megahour.slurm.async_client import AsyncSlurmClient
from megahour.slurm.jobs import SUBMIT_FAILED_STATE, UNKNOWN_STATE, JobStatus, sbatch_args

RUN_ID = "manual__2026-11-29T22:50:00+00:00"
SAFE_RUN_ID = "manual__2026-11-29T22_50_00_00_00"

# One script, installed under each Slurm tool's name. Jobs live as JSON files in $FAKE_SLURM_DIR/jobs;
# every call is appended to $FAKE_SLURM_DIR/calls.jsonl. FAKE_SLURM_MODE=run (default) runs the wrapped
# command synchronously inside sbatch and records COMPLETED/FAILED; FAKE_SLURM_MODE=queue leaves the job
# PENDING for the test to move along.
FAKE_SLURM = r"""
import json, os, pathlib, subprocess, sys

state = pathlib.Path(os.environ["FAKE_SLURM_DIR"])
jobs = state / "jobs"
jobs.mkdir(parents=True, exist_ok=True)
tool = pathlib.Path(sys.argv[0]).name
args = sys.argv[1:]
with open(state / "calls.jsonl", "a") as calls:
    calls.write(json.dumps([tool, *args]) + "\n")


def opt(name):
    return args[args.index(name) + 1] if name in args else None


def load(job_id):
    path = jobs / f"{job_id}.json"
    return json.loads(path.read_text()) if path.exists() else None


def save(job):
    (jobs / f"{job['id']}.json").write_text(json.dumps(job))


if tool == "sbatch":
    if (state / "sbatch_fails").exists():
        sys.exit("sbatch: error: Batch job submission failed: Invalid partition name specified")
    counter = state / "next_id"
    job_id = int(counter.read_text()) if counter.exists() else 100
    counter.write_text(str(job_id + 1))
    job = {"id": str(job_id), "name": opt("--job-name"), "state": "PENDING", "exit": "0:0",
           "stdout": opt("--output")}
    if os.environ.get("FAKE_SLURM_MODE", "run") == "run":
        with open(job["stdout"], "w") as out:
            rc = subprocess.run(["/bin/sh", "-c", opt("--wrap")], cwd=opt("--chdir"), stdout=out,
                                stderr=subprocess.STDOUT).returncode
        job.update(state="COMPLETED" if rc == 0 else "FAILED", exit=f"{rc}:0")
    save(job)
    print(job_id)
elif tool == "squeue":
    if (state / "squeue_fails").exists():
        sys.exit("squeue: error: slurm_load_jobs error: Unable to contact slurm controller")
    wanted = (opt("--states") or "").split(",")
    for path in sorted(jobs.glob("*.json")):
        job = json.loads(path.read_text())
        if job["name"] == opt("--name") and job["state"] in wanted:
            print(f"{job['id']}|{job['state']}")
elif tool == "scontrol":
    job = load(args[-1])
    if job is None or job.get("forgotten"):
        sys.exit("slurm_load_jobs error: Invalid job id specified")
    print(f"JobId={job['id']} JobName={job['name']} UserId=ingest(990) JobState={job['state']} "
          f"Reason=None Dependency=(null) ExitCode={job['exit']} DerivedExitCode=0:0 "
          f"WorkDir=/tmp StdErr={job['stdout']} StdIn=/dev/null StdOut={job['stdout']} Power=")
elif tool == "sacct":
    job = load(opt("--jobs"))
    if job is not None and not job.get("purged"):
        print(f"{job['id']}|{job['state']}|{job['exit']}")
elif tool == "scancel":
    job = load(args[0])
    if job is not None:
        job["state"] = "CANCELLED"
        save(job)
"""

TOOLS = ("sbatch", "squeue", "scontrol", "sacct", "scancel")


def install_fake_slurm(bin_dir: Path, python: str = sys.executable) -> None:
    """Write the fake Slurm tools into ``bin_dir`` (put it first on PATH, set FAKE_SLURM_DIR)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for tool in TOOLS:
        path = bin_dir / tool
        path.write_text(f"#!{python}\n{FAKE_SLURM}")
        path.chmod(0o755)


class FakeSlurm:
    def __init__(self, state: Path) -> None:
        self.state = state

    def calls(self, tool: str | None = None) -> list[list[str]]:
        path = self.state / "calls.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        return rows if tool is None else [row[1:] for row in rows if row[0] == tool]

    def job(self, job_id: str) -> dict:
        return json.loads((self.state / "jobs" / f"{job_id}.json").read_text())

    def put(self, **job: str) -> None:
        (self.state / "jobs").mkdir(parents=True, exist_ok=True)
        (self.state / "jobs" / f"{job['id']}.json").write_text(json.dumps(job))

    def update(self, job_id: str, **changes: object) -> None:
        self.put(**{**self.job(job_id), **changes})


@pytest.fixture
def slurm(tmp_path, monkeypatch) -> FakeSlurm:
    install_fake_slurm(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SLURM_DIR", str(tmp_path / "slurm"))
    return FakeSlurm(tmp_path / "slurm")


def make_op(tmp_path: Path, step: str = "validate", **kwargs) -> so.SlurmStepOperator:
    kwargs.setdefault("batch", 3 if step in STEPS and STEPS[step].per_batch else None)
    return so.SlurmStepOperator(
        task_id=f"batch.{step}" if kwargs["batch"] is not None else step,
        step=step,
        partition="ingest",
        megahour="/usr/local/bin/megahour",
        runs=str(tmp_path / "runs"),
        poll_interval_s=0.01,
        **kwargs,
    )


def context(op: so.SlurmStepOperator, params: dict | None = None, try_number: int = 1, **ti) -> dict:
    ti_ns = SimpleNamespace(
        task_id=op.task_id, map_index=3 if op.batch is not None else -1, try_number=try_number
    )
    for key, value in ti.items():
        setattr(ti_ns, key, value)
    return {"params": {"steps": {}, "jitter_s": 0, **(params or {})}, "run_id": RUN_ID, "ti": ti_ns}


def run_trigger(trigger: so.SlurmJobTrigger) -> list:
    async def collect():
        return [event async for event in trigger.run()]

    return asyncio.run(collect())


# Pure helpers ------------------------------------------------------------------------------------------


def test_stagger_delay_is_deterministic_bounded_and_spread() -> None:
    delays = [so.stagger_delay(RUN_ID, "batch.transcode", i, 5.0) for i in range(200)]
    assert delays == [so.stagger_delay(RUN_ID, "batch.transcode", i, 5.0) for i in range(200)]
    assert all(0 <= d < 5.0 for d in delays)
    assert len(set(delays)) == 200
    assert min(delays) < 1.0 and max(delays) > 4.0  # spread over the window, not bunched
    assert so.stagger_delay(RUN_ID, "batch.qc", 0, 5.0) != so.stagger_delay(RUN_ID, "batch.transcode", 0, 5.0)
    assert so.stagger_delay(RUN_ID, "plan", -1, 0) == 0.0
    assert so.stagger_delay(RUN_ID, "plan", -1, -3) == 0.0


def test_poll_delay_doubles_from_a_quarter_second_up_to_the_interval() -> None:
    assert [so.poll_delay(n, 2.0) for n in range(6)] == [0.25, 0.5, 1.0, 2.0, 2.0, 2.0]
    assert so.poll_delay(10_000, 2.0) == 2.0
    assert so.poll_delay(0, 0) == 0


def test_names_and_paths() -> None:
    assert so.job_name(RUN_ID, "batch.validate", 3) == f"mh-ingest.{SAFE_RUN_ID}.batch.validate.3"
    assert so.job_name(RUN_ID, "plan", -1) == f"mh-ingest.{SAFE_RUN_ID}.plan.-1"
    assert so.run_dir_for("/srv/runs", RUN_ID) == Path("/srv/runs") / SAFE_RUN_ID
    assert so.log_path("/r", "validate", 3, 2) == Path("/r/logs/validate-3.try2.log")
    assert so.log_path("/r", "plan", None, 1) == Path("/r/logs/plan.try1.log")


def test_latest_log_picks_the_highest_try(tmp_path) -> None:
    assert so.latest_log(tmp_path, "validate", 3) is None
    (tmp_path / "logs").mkdir()
    for name in (
        "validate-3.try1.log",
        "validate-3.try10.log",
        "validate-3.try2.log",
        "validate-30.try99.log",
    ):
        (tmp_path / "logs" / name).touch()
    assert so.latest_log(tmp_path, "validate", 3) == tmp_path / "logs" / "validate-3.try10.log"


def test_step_command() -> None:
    assert so.step_command("/bin/mh", "plan", "/r") == [
        "/bin/mh",
        "ingest",
        "step",
        "plan",
        "--run-dir",
        "/r",
    ]
    assert so.step_command("/bin/mh", "qc", "/r", batch=4)[-2:] == ["--batch", "4"]
    argv = so.step_command("/bin/mh", "discover", "/r", params={"steps": {"qc": False}, "jitter_s": 1})
    assert argv[-2] == "--params"
    assert json.loads(argv[-1]) == {"steps": {"qc": False}, "jitter_s": 1}


def test_sbatch_args_carry_the_steps_budget() -> None:
    command = so.step_command("/bin/mh", "discover", "/r un", params={"landing": "/l/it's"})
    job = so.step_job(
        STEPS["transcode"],
        partition="ingest",
        name="mh-ingest.x",
        output="/r/o.log",
        workdir="/r",
        command=command,
    )
    argv = sbatch_args(job)
    opts = dict(zip(argv[2::2], argv[3::2], strict=False))
    assert argv[:2] == ["sbatch", "--parsable"]
    assert opts["--job-name"] == "mh-ingest.x"
    assert opts["--partition"] == "ingest"
    assert opts["--cpus-per-task"] == str(STEPS["transcode"].cpus)
    assert opts["--mem"] == f"{STEPS['transcode'].mem_mb}M"
    assert opts["--time"] == str(STEPS["transcode"].time_limit_min)
    assert opts["--output"] == "/r/o.log"
    assert opts["--chdir"] == "/r"
    # --wrap is one shell line that splits back into exactly the command (quotes, spaces, JSON survive).
    import shlex

    assert shlex.split(opts["--wrap"]) == command


def test_step_enabled() -> None:
    assert so.step_enabled({}, "qc")
    assert so.step_enabled({"steps": {"qc": True}}, "qc")
    assert not so.step_enabled({"steps": {"qc": False}}, "qc")
    assert so.step_enabled({"steps": {"qc": False}}, "previews")


def test_tail(tmp_path) -> None:
    path = tmp_path / "x.log"
    path.write_text("".join(f"line {i}\n" for i in range(1000)))
    assert so.tail(path, 3) == ["line 997", "line 998", "line 999"]
    assert so.tail(tmp_path / "missing.log") == []
    assert so.tail(None) == []


# The operator against the fake Slurm -------------------------------------------------------------------


def test_unknown_step_is_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match="unknown step"):
        make_op(tmp_path, step="transcodee", batch=None)


def test_switched_off_step_skips_without_submitting(tmp_path, slurm) -> None:
    op = make_op(tmp_path, "qc")
    with pytest.raises(AirflowSkipException):
        op.execute(context(op, {"steps": {"qc": False}, "jitter_s": 5}))
    assert slurm.calls() == []


def test_summary_is_never_skipped_because_it_decides_the_run(tmp_path, slurm) -> None:
    op = make_op(tmp_path, "summary")
    with pytest.raises(TaskDeferred) as deferred:  # a skipped leaf would make the run green
        op.execute(context(op, {"steps": {"summary": False}}))
    assert deferred.value.method_name == "complete"
    assert deferred.value.timeout is not None  # a job that never ends cannot hold the run forever
    assert deferred.value.trigger.submit[0] == "sbatch"


def test_jitter_is_waited_out_in_the_trigger_before_sbatch(tmp_path, slurm) -> None:
    op = make_op(tmp_path, "transcode")
    op.megahour = "true"  # the job succeeds at once
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context(op, {"jitter_s": 30}))
    trigger = deferred.value.trigger
    assert isinstance(trigger, so.SlurmJobTrigger) and deferred.value.method_name == "complete"
    assert trigger.delay_s == so.stagger_delay(RUN_ID, op.task_id, 3, 30) > 0
    assert deferred.value.timeout >= so.timedelta(seconds=trigger.delay_s)
    assert slurm.calls("sbatch") == []  # nothing submitted while waiting
    trigger.delay_s = 0.01  # the test does not wait out the real delay
    (event,) = run_trigger(trigger)
    assert isinstance(event, TaskSuccessEvent)
    assert len(slurm.calls("sbatch")) == 1


def test_the_trigger_submits_sbatch_with_the_steps_limits(tmp_path, slurm) -> None:
    op = make_op(tmp_path, "transcode")
    ctx = context(op, try_number=2)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)
    trigger = deferred.value.trigger
    assert isinstance(trigger, so.SlurmJobTrigger) and deferred.value.method_name == "complete"
    assert trigger.delay_s == 0 and trigger.job_id is None
    assert slurm.calls("sbatch") == []  # the worker only prepares the call
    assert asyncio.run(trigger._submit()) == ("100", "")
    (sbatch,) = slurm.calls("sbatch")
    opts = dict(zip(sbatch[1::2], sbatch[2::2], strict=False))
    run_dir = tmp_path / "runs" / SAFE_RUN_ID
    assert opts["--job-name"] == f"mh-ingest.{SAFE_RUN_ID}.batch.transcode.3"
    assert opts["--cpus-per-task"] == str(STEPS["transcode"].cpus)
    assert opts["--mem"] == f"{STEPS['transcode'].mem_mb}M"
    assert opts["--time"] == str(STEPS["transcode"].time_limit_min)
    assert opts["--partition"] == "ingest"
    assert opts["--output"] == str(run_dir / "logs" / "transcode-3.try2.log")
    assert opts["--wrap"] == (f"/usr/local/bin/megahour ingest step transcode --run-dir {run_dir} --batch 3")
    assert (run_dir / "logs").is_dir()  # made before the job needs it
    # The trigger survives serialization (it is rebuilt in the triggerer from these kwargs).
    classpath, kwargs = trigger.serialize()
    assert classpath == "megahour.ingest.slurm_operator.SlurmJobTrigger"
    assert so.SlurmJobTrigger(**kwargs).serialize() == (classpath, kwargs)
    assert kwargs["submit"][0] == "sbatch" and kwargs["job_name"] == opts["--job-name"]


def test_a_rebuilt_trigger_attaches_instead_of_submitting_twice(tmp_path, slurm, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_SLURM_MODE", "queue")
    op = make_op(tmp_path, "transcode")
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context(op))
    kwargs = deferred.value.trigger.serialize()[1]
    first = so.SlurmJobTrigger(**kwargs)
    assert asyncio.run(first._submit()) == ("100", "")
    again = so.SlurmJobTrigger(**kwargs)  # the triggerer restarted: same kwargs, job already queued
    assert asyncio.run(again._submit()) == ("100", "")
    assert len(slurm.calls("sbatch")) == 1


def test_discover_gets_the_runs_params(tmp_path, slurm) -> None:
    op = make_op(tmp_path, "discover")
    params = {"steps": {"qc": False}, "jitter_s": 0, "fail_steps": ["qc"], "landing": "/l"}
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context(op, params))
    wrap = deferred.value.trigger.submit[-1]
    assert "--params" in wrap and '"fail_steps":["qc"]' in wrap


def test_retry_attaches_to_the_live_job_instead_of_resubmitting(tmp_path, slurm) -> None:
    op = make_op(tmp_path, "upload")
    name = f"mh-ingest.{SAFE_RUN_ID}.batch.upload.3"
    slurm.put(id="41", name=name, state="RUNNING", exit="0:0", stdout="/x/upload-3.try1.log")
    slurm.put(id="40", name=name, state="FAILED", exit="1:0", stdout="/x/upload-3.try0.log")
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context(op, {"jitter_s": 30}, try_number=2))
    assert deferred.value.trigger.job_id == "41"
    assert deferred.value.trigger.submit is None and deferred.value.trigger.delay_s == 0
    slurm.update("41", state="COMPLETED")
    (event,) = run_trigger(deferred.value.trigger)
    assert isinstance(event, TaskSuccessEvent)
    assert slurm.calls("sbatch") == []


def test_squeue_failure_fails_closed(tmp_path, slurm) -> None:
    (slurm.state).mkdir(parents=True, exist_ok=True)
    (slurm.state / "squeue_fails").touch()
    op = make_op(tmp_path, "upload")
    with pytest.raises(AirflowException) as raised:
        op.execute(context(op))
    assert str(raised.value) == (
        "squeue exited 1: squeue: error: slurm_load_jobs error: Unable to contact slurm controller"
    )
    assert slurm.calls("sbatch") == []


def test_a_missing_squeue_fails_closed_and_says_why(tmp_path, monkeypatch) -> None:
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    op = make_op(tmp_path, "upload")
    with pytest.raises(
        AirflowException, match=r"^`squeue --noheader --name mh-ingest\.\S+ .*` could not run: "
    ) as raised:
        op.execute(context(op))
    assert "No such file or directory" in str(raised.value)


def test_a_rebuilt_trigger_fails_closed_when_squeue_fails(tmp_path, slurm) -> None:
    op = make_op(tmp_path, "upload")
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context(op))
    (slurm.state / "squeue_fails").touch()  # slurmctld went away between the worker and the triggerer
    (event,) = run_trigger(deferred.value.trigger)
    assert event.payload["state"] == SUBMIT_FAILED_STATE
    assert event.payload["detail"] == (
        "squeue exited 1: squeue: error: slurm_load_jobs error: Unable to contact slurm controller"
    )
    assert slurm.calls("sbatch") == []


def test_sbatch_failure_resumes_the_task_to_raise(tmp_path, slurm) -> None:
    (slurm.state).mkdir(parents=True, exist_ok=True)
    (slurm.state / "sbatch_fails").touch()
    op = make_op(tmp_path, "upload")
    ctx = context(op)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)
    (event,) = run_trigger(deferred.value.trigger)
    assert event.payload["state"] == SUBMIT_FAILED_STATE
    with pytest.raises(AirflowException, match=r"could not be submitted.*Invalid partition") as raised:
        op.complete(ctx, event=event.payload)
    assert not isinstance(raised.value, AirflowFailException)  # retryable


def test_trigger_waits_for_the_job_to_end(tmp_path, slurm, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_SLURM_MODE", "queue")
    op = make_op(tmp_path, "validate")
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context(op))
    trigger = deferred.value.trigger
    polls = {"n": 0}
    real_query = AsyncSlurmClient.query_job

    async def query_and_advance(self, job_id):
        polls["n"] += 1
        if polls["n"] == 3:
            slurm.update(job_id, state="RUNNING")
        if polls["n"] == 5:
            slurm.update(job_id, state="FAILED", exit="2:0")
        return await real_query(self, job_id)

    monkeypatch.setattr(AsyncSlurmClient, "query_job", query_and_advance)
    (event,) = run_trigger(trigger)
    assert polls["n"] == 5
    assert event.payload["state"] == "FAILED" and event.payload["exit_code"] == 2
    assert event.payload["stdout"].endswith("validate-3.try1.log")


def test_a_non_deferrable_step_waits_on_the_worker_and_returns(tmp_path, slurm) -> None:
    op = make_op(tmp_path, "plan", deferrable=False)
    op.megahour = "true"  # the job succeeds; plan.json is what the real plan step would write
    run_dir = tmp_path / "runs" / SAFE_RUN_ID
    run_dir.mkdir(parents=True)
    (run_dir / "plan.json").write_text(json.dumps({"batches": [[], []]}))
    assert op.execute(context(op)) == [0, 1]  # no TaskDeferred: plan's XCom comes from the worker
    assert op._job_id == "100" and len(slurm.calls("sbatch")) == 1


def test_a_non_deferrable_step_raises_when_its_job_fails(tmp_path, slurm) -> None:
    op = make_op(tmp_path, "plan", deferrable=False)
    op.megahour = "false"
    with pytest.raises(AirflowException, match="FAILED"):
        op.execute(context(op))


def test_trigger_ends_a_succeeded_task_itself_and_resumes_a_failed_one(tmp_path, slurm, capfd) -> None:
    out = tmp_path / "validate-0.try1.log"
    out.write_text("one\ntwo\nvalidated 3 episodes\n")
    slurm.put(id="8", name="n", state="COMPLETED", exit="0:0", stdout=str(out))
    slurm.put(id="9", name="n", state="FAILED", exit="1:0", stdout=str(out))
    (ended,) = run_trigger(so.SlurmJobTrigger("8", poll_interval=0, log_tail_lines=1))
    assert isinstance(ended, TaskSuccessEvent)
    logged = "".join(capfd.readouterr())  # the job's output tail goes to the trigger's (the task's) log
    assert "validated 3 episodes" in logged and "two" not in logged
    (resumed,) = run_trigger(so.SlurmJobTrigger("9", poll_interval=0))
    assert not isinstance(resumed, TaskSuccessEvent)
    assert resumed.payload["state"] == "FAILED" and resumed.payload["exit_code"] == 1


def test_trigger_falls_back_to_sacct_when_slurmctld_forgot_the_job(tmp_path, slurm) -> None:
    slurm.put(id="7", name="n", state="TIMEOUT", exit="0:15", stdout="/o", forgotten=True)
    (event,) = run_trigger(so.SlurmJobTrigger("7", poll_interval=0, log="/runs/x/logs/qc-0.try1.log"))
    assert event.payload["state"] == "TIMEOUT"
    assert event.payload["stdout"] == "/runs/x/logs/qc-0.try1.log"  # sacct has no path; the log kwarg


def test_trigger_gives_up_as_unknown_when_slurm_cannot_tell(tmp_path, slurm) -> None:
    slurm.state.mkdir(parents=True, exist_ok=True)
    (event,) = run_trigger(so.SlurmJobTrigger("404", poll_interval=0, max_misses=3))
    assert event.payload["state"] == UNKNOWN_STATE
    assert "neither scontrol nor sacct" in event.payload["detail"]
    assert len(slurm.calls("scontrol")) == 3


def test_trigger_on_kill_cancels_the_job(slurm) -> None:
    slurm.put(id="9", name="n", state="RUNNING", exit="0:0", stdout="/o")
    asyncio.run(so.SlurmJobTrigger("9").on_kill())
    assert slurm.job("9")["state"] == "CANCELLED"


def refusing_scancel(bin_dir: Path) -> None:
    """An scancel that refuses every job, first on PATH (before the fake Slurm's)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "scancel").write_text(
        '#!/bin/sh\necho "scancel: error: Kill job error on job id $1" >&2\nexit 1\n'
    )
    (bin_dir / "scancel").chmod(0o755)


def test_trigger_on_kill_logs_a_refused_scancel(tmp_path, slurm, monkeypatch, capfd) -> None:
    refusing_scancel(tmp_path / "refuse")
    monkeypatch.setenv("PATH", f"{tmp_path / 'refuse'}{os.pathsep}{os.environ['PATH']}")
    asyncio.run(so.SlurmJobTrigger("9").on_kill())  # no exception: the triggerer goes on
    assert "scancel 9 failed (1): scancel: error: Kill job error on job id 9" in "".join(capfd.readouterr())


def test_operator_on_kill_ignores_a_refused_scancel_but_not_a_missing_one(tmp_path, monkeypatch) -> None:
    op = make_op(tmp_path, "validate")
    op._job_id = "9"
    refusing_scancel(tmp_path / "refuse")
    monkeypatch.setenv("PATH", str(tmp_path / "refuse"))
    op.on_kill()  # the job is gone or not ours: nothing left to do
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(AirflowException, match=r"^`scancel 9` could not run: .*No such file"):
        op.on_kill()


def test_operator_on_kill_cancels_the_job(tmp_path, slurm, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_SLURM_MODE", "queue")
    op = make_op(tmp_path, "validate")
    op.on_kill()  # nothing prepared yet: nothing to cancel
    assert slurm.calls("scancel") == []
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context(op))
    asyncio.run(deferred.value.trigger._submit())
    op.on_kill()  # the worker never learnt the job id; the job's unique name finds it
    assert slurm.calls("scancel") == [["--name", f"mh-ingest.{SAFE_RUN_ID}.batch.validate.3"]]


def test_complete_succeeds_on_completed_exit_0(tmp_path) -> None:
    op = make_op(tmp_path, "validate")
    log = tmp_path / "v.log"
    log.write_text("validated 12 episodes\n")
    event = JobStatus("5", "COMPLETED", 0, 0, str(log)).to_dict()
    assert op.complete(context(op), event=event) is None


def test_plan_returns_the_batch_indexes_to_map_over(tmp_path) -> None:
    op = make_op(tmp_path, "plan")
    run_dir = tmp_path / "runs" / SAFE_RUN_ID
    run_dir.mkdir(parents=True)
    (run_dir / "plan.json").write_text(json.dumps({"batches": [[], [], []]}))
    event = JobStatus("5", "COMPLETED", 0, 0).to_dict()
    assert op.complete(context(op), event=event) == [0, 1, 2]


@pytest.mark.parametrize(
    ("state", "exit_code", "signal"),
    [
        ("FAILED", 1, 0),
        ("TIMEOUT", 0, 15),
        ("OUT_OF_MEMORY", 0, 9),
        ("CANCELLED", 0, 15),
        ("UNKNOWN", None, None),
    ],
)
def test_complete_raises_otherwise(tmp_path, state, exit_code, signal) -> None:
    op = make_op(tmp_path, "transcode")
    event = JobStatus("5", state, exit_code, signal, str(tmp_path / "missing.log")).to_dict()
    with pytest.raises(AirflowException, match=state) as raised:
        op.complete(context(op), event=event)
    assert not isinstance(raised.value, AirflowFailException)  # retryable


def test_final_exit_codes_fail_without_retry(tmp_path) -> None:
    op = make_op(tmp_path, "summary", final_exit_codes=(3,))
    with pytest.raises(AirflowFailException):
        op.complete(context(op), event=JobStatus("5", "FAILED", 3, 0).to_dict())
    with pytest.raises(AirflowException) as raised:
        op.complete(context(op), event=JobStatus("5", "FAILED", 1, 0).to_dict())
    assert not isinstance(raised.value, AirflowFailException)


def test_complete_logs_the_jobs_output_tail(tmp_path, monkeypatch) -> None:
    op = make_op(tmp_path, "transcode", log_tail_lines=2)
    log = tmp_path / "t.log"
    log.write_text("one\ntwo\nthree\nTraceback: boom\n")
    seen: list[str] = []
    monkeypatch.setattr(
        type(op), "log", property(lambda self: SimpleNamespace(info=lambda msg, *a: seen.append(msg % a)))
    )
    with pytest.raises(AirflowException):
        op.complete(context(op), event=JobStatus("5", "FAILED", 1, 0, str(log)).to_dict())
    assert any("three\nTraceback: boom" in line for line in seen)
    assert not any("two" in line for line in seen)


def test_end_to_end_through_the_fake_slurm(tmp_path, slurm) -> None:
    """execute -> submit -> trigger -> complete with a real (trivial) wrapped command."""
    op = make_op(tmp_path, "validate")
    op.megahour = "echo"  # the wrapped command just prints its arguments
    ctx = context(op)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)
    (ended,) = run_trigger(deferred.value.trigger)
    assert isinstance(ended, TaskSuccessEvent)
    (out,) = (tmp_path / "runs" / SAFE_RUN_ID / "logs").iterdir()
    assert so.tail(out) == [f"ingest step validate --run-dir {tmp_path / 'runs' / SAFE_RUN_ID} --batch 3"]
    # `airflow dags test` resumes the task with the end event's payload, the state.
    assert op.complete(ctx, event="success") is None
