"""megahour.slurm.async_client: the triggerer's job calls answer with a value or the problem, never raise."""

from __future__ import annotations

import asyncio
import sys

import pytest

from megahour.slurm.async_client import AsyncSlurmClient, Completed, run_async
from megahour.slurm.jobs import JOB_CALL_TIMEOUT_S, JobStatus, LiveJob, scontrol_job_args

SQUEUE_DOWN = "squeue: error: slurm_load_jobs error: Unable to contact slurm controller\n"


class FakeAsyncRunner:
    """Stands in for run_async: answers by command prefix with (rc, stdout, stderr), records every call."""

    def __init__(self, answers: dict[str, tuple[int, str, str]]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []
        self.settings: list[tuple[float, dict[str, str]]] = []

    async def __call__(self, argv, timeout, env) -> Completed:
        self.calls.append(list(argv))
        self.settings.append((timeout, dict(env)))
        command = " ".join(argv)
        for prefix in sorted(self.answers, key=len, reverse=True):
            if command.startswith(prefix):
                rc, out, err = self.answers[prefix]
                return Completed(tuple(argv), rc, out, err)
        raise AssertionError(f"unexpected command {argv}")


def client(**answers: tuple[int, str, str]) -> tuple[AsyncSlurmClient, FakeAsyncRunner]:
    runner = FakeAsyncRunner({prefix.replace("_", " "): answer for prefix, answer in answers.items()})
    return AsyncSlurmClient(runner=runner, env={"PATH": "/usr/bin", "SLURM_TIME_FORMAT": "relative"}), runner


def test_the_job_calls_time_out_after_a_minute_with_iso_times() -> None:
    slurm, runner = client(squeue=(0, "", ""))
    assert asyncio.run(slurm.live_jobs("n")).value == []
    assert runner.settings == [(JOB_CALL_TIMEOUT_S, {"PATH": "/usr/bin", "SLURM_TIME_FORMAT": "standard"})]
    assert JOB_CALL_TIMEOUT_S == 60


def test_live_jobs_oldest_first_or_the_problem() -> None:
    slurm, runner = client(squeue=(0, "12|RUNNING\n9|PENDING\n", ""))
    answer = asyncio.run(slurm.live_jobs("mh-ingest.x"))
    assert answer.value == [LiveJob("9", "PENDING"), LiveJob("12", "RUNNING")] and answer.problem == ""
    assert runner.calls[0][:4] == ["squeue", "--noheader", "--name", "mh-ingest.x"]
    slurm, _ = client(squeue=(1, "", SQUEUE_DOWN))
    failed = asyncio.run(slurm.live_jobs("mh-ingest.x"))
    # No value, not an empty list: "could not tell" must never read as "no live job".
    assert failed.value is None
    assert failed.problem == f"squeue exited 1: {SQUEUE_DOWN.strip()}"


def test_submit_returns_the_job_id_or_the_problem() -> None:
    argv = ["sbatch", "--parsable", "--job-name", "n", "--wrap", "true"]
    slurm, runner = client(sbatch=(0, "57;cluster\n", ""))
    assert asyncio.run(slurm.submit(argv)).value == "57"
    assert runner.calls == [argv]
    stderr = "sbatch: error: Invalid partition name specified\n" + "x" * 400
    slurm, _ = client(sbatch=(1, "", stderr))
    failed = asyncio.run(slurm.submit(argv))
    assert failed.value is None
    assert failed.problem == f"sbatch exited 1: {stderr[:300]}"  # stderr cut at 300 characters
    slurm, _ = client(sbatch=(0, "\n", ""))
    assert asyncio.run(slurm.submit(argv)).problem == "sbatch printed no job id: '\\n'"
    slurm, runner = client()
    refused = asyncio.run(slurm.submit(["scancel", "--name", "n"]))
    assert refused.value is None and "not an `sbatch --parsable` call" in refused.problem
    assert runner.calls == []


def test_query_job_asks_scontrol_first() -> None:
    slurm, runner = client(scontrol=(0, "JobId=5 JobState=RUNNING ExitCode=0:0 StdOut=/o\n", ""))
    assert asyncio.run(slurm.query_job("5")).value == JobStatus("5", "RUNNING", 0, 0, "/o")
    assert runner.calls == [scontrol_job_args("5")]


FORGOTTEN = "slurm_load_jobs error: Invalid job id specified\n"


@pytest.mark.parametrize(
    ("answers", "problem"),
    [
        ({"scontrol": (0, "garbage\n", "")}, "scontrol output not understood: garbage"),
        (
            {"scontrol": (1, "", "Unable to contact slurm controller\n")},
            "scontrol failed (1): Unable to contact",
        ),
        (
            {
                "scontrol": (1, "", FORGOTTEN),
                "sacct": (1, "", "sacct: error: Problem talking to the database"),
            },
            "scontrol no longer knows job 5 and sacct failed (1): sacct: error: Problem talking",
        ),
        ({"scontrol": (1, "", FORGOTTEN), "sacct": (0, "6|COMPLETED|0:0\n", "")}, "job 5 is in neither"),
    ],
)
def test_query_job_says_why_it_could_not_tell(answers, problem) -> None:
    slurm, runner = client()
    runner.answers = answers
    answer = asyncio.run(slurm.query_job("5"))
    assert answer.value is None
    assert answer.problem.startswith(problem)


def test_query_job_falls_back_to_sacct_once_slurmctld_forgot_the_job() -> None:
    slurm, runner = client(
        scontrol=(1, "", FORGOTTEN), sacct=(0, "5|TIMEOUT|0:15\n5.batch|CANCELLED|0:15\n", "")
    )
    assert asyncio.run(slurm.query_job("5")).value == JobStatus("5", "TIMEOUT", 0, 15)
    assert [call[0] for call in runner.calls] == ["scontrol", "sacct"]


def test_cancel_by_id_or_name() -> None:
    slurm, runner = client(scancel=(0, "", ""))
    assert asyncio.run(slurm.cancel("9")) == ""
    assert asyncio.run(slurm.cancel(name="mh-ingest.x")) == ""
    assert runner.calls == [["scancel", "9"], ["scancel", "--name", "mh-ingest.x"]]
    slurm, _ = client(scancel=(1, "", "scancel: error: Kill job error on job id 9\n"))
    assert (
        asyncio.run(slurm.cancel("9")) == "scancel 9 failed (1): scancel: error: Kill job error on job id 9"
    )


# run_async: real subprocesses ---------------------------------------------------------------------------


def test_run_async_returns_status_and_output_and_passes_the_env() -> None:
    code = "import os, sys; print(os.environ['SLURM_TIME_FORMAT']); sys.stderr.write('e'); sys.exit(3)"
    done = asyncio.run(run_async([sys.executable, "-c", code], 10, {"SLURM_TIME_FORMAT": "standard"}))
    assert (done.returncode, done.stdout, done.stderr) == (3, "standard\n", "e")


def test_run_async_turns_a_missing_binary_into_status_minus_one(tmp_path) -> None:
    done = asyncio.run(run_async([str(tmp_path / "squeue")], 10, {}))
    assert done.returncode == -1 and done.stderr.startswith(f"could not start {tmp_path / 'squeue'}: ")


def test_run_async_kills_a_command_past_its_timeout() -> None:
    done = asyncio.run(run_async([sys.executable, "-c", "import time; time.sleep(30)"], 0.5, {}))
    assert done.returncode == -1 and done.stderr == f"{sys.executable} timed out after 0.5s"


def test_missing_tools_answer_with_the_problem(tmp_path) -> None:
    slurm = AsyncSlurmClient(env={"PATH": str(tmp_path)})  # the real runner, nothing on PATH
    live = asyncio.run(slurm.live_jobs("n"))
    assert live.value is None and live.problem.startswith("squeue exited -1: could not start squeue: ")
    assert asyncio.run(slurm.query_job("5")).problem.startswith(
        "scontrol failed (-1): could not start scontrol"
    )
    assert asyncio.run(slurm.cancel("5")).startswith("scancel 5 failed (-1): could not start scancel")
