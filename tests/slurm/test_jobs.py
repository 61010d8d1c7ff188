"""megahour.slurm.jobs: the batch-job commands, their parsers and JobStatus (pure)."""

from __future__ import annotations

import json
import shlex

import pytest

from megahour.slurm.jobs import (
    ATTACHABLE_STATES,
    SUBMIT_FAILED_STATE,
    TERMINAL_STATES,
    UNKNOWN_STATE,
    BatchJob,
    JobStatus,
    LiveJob,
    check_sbatch_args,
    job_forgotten,
    normalize_state,
    parse_exit_code,
    parse_sacct,
    parse_sbatch_job_id,
    parse_scontrol_job,
    parse_squeue_jobs,
    sacct_args,
    sbatch_args,
    scancel_args,
    scontrol_job_args,
    squeue_by_name_args,
)

JOB = BatchJob(
    name="mh-ingest.x",
    partition="ingest",
    cpus=2,
    mem_mb=2048,
    time_limit_min=120,
    workdir="/r",
    output="/r/o.log",
    command=["/bin/mh", "ingest", "step", "discover", "--run-dir", "/r un", "--params", '{"l":"/l/it\'s"}'],
)


def test_sbatch_args_carry_the_budget_and_the_command() -> None:
    argv = sbatch_args(JOB)
    assert argv == [
        "sbatch",
        "--parsable",
        "--job-name",
        "mh-ingest.x",
        "--partition",
        "ingest",
        "--nodes",
        "1",
        "--ntasks",
        "1",
        "--cpus-per-task",
        "2",
        "--mem",
        "2048M",
        "--time",
        "120",
        "--chdir",
        "/r",
        "--output",
        "/r/o.log",
        "--wrap",
        argv[-1],
    ]
    # --wrap is one shell line that splits back into exactly the command (quotes, spaces, JSON survive).
    assert shlex.split(argv[-1]) == list(JOB.command)
    check_sbatch_args(argv)


@pytest.mark.parametrize("argv", [[], ["sbatch"], ["sbatch", "--wrap", "x"], ["squeue", "--parsable"]])
def test_only_a_prepared_sbatch_call_passes_the_check(argv) -> None:
    with pytest.raises(ValueError, match="not an `sbatch --parsable` call"):
        check_sbatch_args(argv)


def test_query_and_cancel_commands() -> None:
    assert squeue_by_name_args("mh-ingest.x") == [
        "squeue",
        "--noheader",
        "--name",
        "mh-ingest.x",
        "--states",
        "PENDING,RUNNING,CONFIGURING,SUSPENDED,REQUEUED",
        "--format",
        "%i|%T",
    ]
    assert "COMPLETING" not in ATTACHABLE_STATES  # a job on its way out is never adopted
    assert scontrol_job_args("57") == ["scontrol", "show", "job", "--oneliner", "57"]
    assert sacct_args("57") == [
        "sacct",
        "--noheader",
        "--parsable2",
        "--allocations",
        "--jobs",
        "57",
        "--format",
        "JobID,State,ExitCode",
    ]
    assert scancel_args("57") == ["scancel", "57"]
    assert scancel_args(name="mh-ingest.x") == ["scancel", "--name", "mh-ingest.x"]
    with pytest.raises(ValueError):
        scancel_args()
    with pytest.raises(ValueError):
        scancel_args("57", name="mh-ingest.x")


def test_parse_sbatch_job_id() -> None:
    assert parse_sbatch_job_id("1234\n") == "1234"
    assert parse_sbatch_job_id("1234;cluster\n") == "1234"
    with pytest.raises(ValueError):
        parse_sbatch_job_id("")
    with pytest.raises(ValueError):
        parse_sbatch_job_id("sbatch: error: something\n")


def test_parse_squeue_jobs() -> None:
    assert parse_squeue_jobs("") == []
    jobs = parse_squeue_jobs("12|RUNNING\n9|PENDING\ngarbage\n")
    assert jobs == [("9", "PENDING"), ("12", "RUNNING")]
    assert jobs[-1] == LiveJob(job_id="12", state="RUNNING")


def test_states_and_exit_codes() -> None:
    assert normalize_state("CANCELLED by 1000") == "CANCELLED"
    assert normalize_state("CANCELLED+") == "CANCELLED"
    assert normalize_state("completed") == "COMPLETED"
    assert normalize_state("") == UNKNOWN_STATE
    assert parse_exit_code("0:0") == (0, 0)
    assert parse_exit_code("3:0") == (3, 0)
    assert parse_exit_code("0:9") == (0, 9)
    assert parse_exit_code("") == (None, None)


SCONTROL_22_05 = (
    "JobId=57 JobName=mh-ingest.x.batch.qc.0 UserId=ingest(990) GroupId=megahour(990) MCS_label=N/A "
    "Priority=4294901703 Nice=0 Account=(null) QOS=normal JobState=FAILED Reason=NonZeroExitCode "
    "Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=1:0 DerivedExitCode=0:0 "
    "RunTime=00:00:01 TimeLimit=00:30:00 Partition=ingest NodeList=gpu-1 NumCPUs=1 "
    "Command=(null) WorkDir=/srv/megahour/ingest/runs/x StdErr=/srv/x/logs/qc-0.try1.log StdIn=/dev/null "
    "StdOut=/srv/x/logs/qc-0.try1.log Power="
)


def test_parse_scontrol_job() -> None:
    status = parse_scontrol_job(SCONTROL_22_05)
    assert status == JobStatus("57", "FAILED", 1, 0, "/srv/x/logs/qc-0.try1.log")
    assert status.finished and not status.succeeded
    running = parse_scontrol_job("JobId=5 JobState=RUNNING Reason=None ExitCode=0:0 StdOut=/o")
    assert running is not None and not running.finished
    done = parse_scontrol_job("JobId=5 JobState=COMPLETED Reason=None ExitCode=0:0 StdOut=/o")
    assert done is not None and done.succeeded
    assert parse_scontrol_job("nonsense") is None


def test_a_forgotten_job_is_told_apart_from_a_failed_scontrol() -> None:
    assert job_forgotten("slurm_load_jobs error: Invalid job id specified\n")
    assert not job_forgotten("slurm_load_jobs error: Unable to contact slurm controller (connect failure)")


def test_parse_sacct() -> None:
    text = "57|CANCELLED by 990|0:15\n57.batch|CANCELLED|0:15\n"
    assert parse_sacct(text, "57") == JobStatus("57", "CANCELLED", 0, 15)
    assert parse_sacct("", "57") is None
    assert parse_sacct("58|COMPLETED|0:0\n", "57") is None


def test_job_status_judgement_and_payload() -> None:
    assert JobStatus("1", "COMPLETED", 0, 0).succeeded
    assert not JobStatus("1", "COMPLETED", 2, 0).succeeded
    assert not JobStatus("1", "COMPLETED", 0, 9).succeeded
    assert not JobStatus("1", "TIMEOUT", 0, 0).succeeded
    assert JobStatus("1", "OUT_OF_MEMORY", 0, 0).finished
    assert JobStatus("1", UNKNOWN_STATE).finished
    assert JobStatus("", SUBMIT_FAILED_STATE).finished
    assert not JobStatus("1", "PENDING").finished
    assert all(JobStatus("1", state).finished for state in TERMINAL_STATES)
    assert not any(JobStatus("1", state).finished for state in ATTACHABLE_STATES)
    status = JobStatus("7", "FAILED", 1, 0, "/o.log", "x")
    assert JobStatus.from_dict(json.loads(json.dumps(status.to_dict()))) == status
    assert "FAILED" in status.describe() and "1:0" in status.describe()
    assert status.describe() == "Slurm job 7 ended FAILED, exit code 1:0 (x)"
    assert JobStatus("", SUBMIT_FAILED_STATE, detail="sbatch exited 1: no").describe() == (
        "the Slurm job could not be submitted: sbatch exited 1: no"
    )
    assert JobStatus.from_dict({"job_id": 5}) == JobStatus("5", UNKNOWN_STATE)


def test_a_batch_script_is_submitted_with_its_options_then_its_arguments() -> None:
    from megahour.slurm.jobs import ScriptJob, check_sbatch_args, script_sbatch_args

    argv = script_sbatch_args(
        ScriptJob(
            "/opt/t.sbatch",
            ("--steps", "5"),
            name="j",
            nodes=2,
            export={"B": "2", "A": "x y"},
            extra=("--exclusive",),
        )
    )
    assert argv == [
        "sbatch", "--parsable", "--job-name=j", "--nodes=2", "--export=ALL,A=x y,B=2", "--exclusive",
        "/opt/t.sbatch", "--steps", "5",
    ]  # fmt: skip
    check_sbatch_args(argv)
    assert script_sbatch_args(ScriptJob("/t")) == [
        "sbatch",
        "--parsable",
        "/t",
    ]  # no --export: sbatch's default
    with pytest.raises(ValueError, match="holds a comma"):
        script_sbatch_args(ScriptJob("/t", export={"A": "1,2"}))
