from __future__ import annotations

import subprocess

import pytest

from megahour.slurm.client import SlurmClient, SlurmQueryError
from megahour.slurm.jobs import squeue_by_name_args
from tests.slurm.fixtures import RESERVATIONS, FakeRunner, healthy_runner


def test_queries_run_the_exact_commands_with_timeout_and_iso_times():
    runner = healthy_runner()
    client = SlurmClient(runner=runner, timeout=7, env={"PATH": "/usr/bin", "SLURM_TIME_FORMAT": "relative"})
    assert len(client.nodes().items) == 10
    assert [r.name for r in client.reservations().items] == [
        "megahour-maint-1",
        "megahour-maint-2",
        "team-demo",
    ]
    assert len(client.running_jobs().items) == 3
    assert runner.calls == [
        ["sinfo", "--noheader", "--Node", "--format", "%N|%t|%E|%H|%u"],
        ["scontrol", "show", "reservation", "--oneliner"],
        ["squeue", "--noheader", "--states=RUNNING,COMPLETING", "--format", "%i|%N|%R"],
    ]
    for kwargs in runner.kwargs:
        assert kwargs["timeout"] == 7
        assert kwargs["env"]["SLURM_TIME_FORMAT"] == "standard"
        assert kwargs["capture_output"] and kwargs["text"] and kwargs["check"] is False


def test_default_timeout_is_ten_seconds():
    assert SlurmClient(runner=healthy_runner()).timeout == 10


def test_updates_build_scontrol_commands():
    runner = healthy_runner()
    client = SlurmClient(runner=runner)
    client.drain("gpu-1", "megahour:disk_full /var 99%")
    client.resume("gpu-1")
    client.delete_reservation("megahour-maint-1")
    assert runner.calls == [
        ["scontrol", "update", "NodeName=gpu-1", "State=DRAIN", "Reason=megahour:disk_full /var 99%"],
        ["scontrol", "update", "NodeName=gpu-1", "State=RESUME"],
        ["scontrol", "delete", "ReservationName=megahour-maint-1"],
    ]


@pytest.mark.parametrize("name", ["", "gpu-1 State=DOWN", "gpu-[1-2]", "-x", "a\nb"])
def test_names_that_could_smuggle_arguments_are_refused(name):
    runner = healthy_runner()
    with pytest.raises(ValueError):
        SlurmClient(runner=runner).resume(name)
    assert runner.calls == []


def test_drain_reason_must_be_one_line():
    with pytest.raises(ValueError):
        SlurmClient(runner=healthy_runner()).drain("gpu-1", "megahour:disk_full\nmore")


def test_non_zero_exit_raises_with_command_and_stderr():
    runner = FakeRunner({"sinfo": ("", "slurm_load_partitions: Unable to contact slurm controller\n", 1)})
    with pytest.raises(SlurmQueryError) as info:
        SlurmClient(runner=runner).nodes()
    err = info.value
    assert err.command[0] == "sinfo"
    assert "Unable to contact slurm controller" in err.stderr
    assert "exited 1" in str(err) and "sinfo --noheader" in str(err)


def test_timeout_raises():
    def hang(argv):
        raise subprocess.TimeoutExpired(argv, 10, stderr=b"partial")

    with pytest.raises(SlurmQueryError, match="timed out after 10s: partial"):
        SlurmClient(runner=FakeRunner({"scontrol show": hang})).reservations()


def test_missing_binary_raises():
    def missing(argv):
        raise FileNotFoundError(2, "No such file or directory", argv[0])

    with pytest.raises(SlurmQueryError, match="not found"):
        SlurmClient(runner=FakeRunner({"squeue": missing})).running_jobs()


def test_failed_update_raises():
    runner = FakeRunner({"scontrol update": ("", "slurm_update error: Invalid node name specified\n", 1)})
    with pytest.raises(SlurmQueryError, match="Invalid node name"):
        SlurmClient(runner=runner).resume("gpu-99")


def test_real_subprocess_missing_binary(tmp_path):
    # The default runner is subprocess.run; an empty PATH makes sinfo missing on any machine.
    client = SlurmClient(env={"PATH": str(tmp_path)})
    with pytest.raises(SlurmQueryError):
        client.nodes()


def test_bytes_output_is_decoded():
    def as_bytes(argv):
        return subprocess.CompletedProcess(argv, 0, RESERVATIONS.encode(), b"")

    parsed = SlurmClient(runner=FakeRunner({"scontrol show": as_bytes})).reservations()
    assert len(parsed.items) == 3


# Jobs ----------------------------------------------------------------------------------------------------


def test_live_jobs_by_name_oldest_first():
    runner = FakeRunner({"squeue --noheader --name": ("12|RUNNING\n9|PENDING\n", "", 0)})
    assert SlurmClient(runner=runner).live_jobs("mh-ingest.x") == [("9", "PENDING"), ("12", "RUNNING")]
    assert runner.calls == [squeue_by_name_args("mh-ingest.x")]  # its argv is pinned in test_jobs


def test_live_jobs_fail_closed():
    # "could not tell" must never read as "no live job of that name": the caller would submit a duplicate.
    runner = FakeRunner({"squeue": ("", "slurm_load_jobs error: Unable to contact slurm controller\n", 1)})
    with pytest.raises(SlurmQueryError) as info:
        SlurmClient(runner=runner).live_jobs("mh-ingest.x")
    assert info.value.returncode == 1 and "Unable to contact" in info.value.stderr


def test_cancel_by_id_or_name():
    runner = FakeRunner({"scancel": ("", "", 0)})
    SlurmClient(runner=runner).cancel("9")
    SlurmClient(runner=runner).cancel(name="mh-ingest.x")
    assert runner.calls == [["scancel", "9"], ["scancel", "--name", "mh-ingest.x"]]


def test_a_command_that_did_not_run_has_no_returncode():
    def missing(argv):
        raise FileNotFoundError(2, "No such file or directory", argv[0])

    with pytest.raises(SlurmQueryError) as info:
        SlurmClient(runner=FakeRunner({"scancel": missing})).cancel("9")
    assert info.value.returncode is None and isinstance(info.value.__cause__, FileNotFoundError)
