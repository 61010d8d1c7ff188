"""Whether a job's allocation is fit for a restart in place, from the Slurm adapter's real command shapes."""

from __future__ import annotations

import subprocess

from megahour.run import allocation
from megahour.slurm.client import SlurmClient
from megahour.slurm.parse import parse_sinfo_nodes
from tests.slurm.fixtures import SINFO, FakeRunner


def _client(hostnames: str, sinfo: str = SINFO, sinfo_rc: int = 0) -> tuple[SlurmClient, FakeRunner]:
    runner = FakeRunner({"scontrol show hostnames": (hostnames, "", 0), "sinfo": (sinfo, "boom", sinfo_rc)})
    return SlurmClient(runner=runner), runner


def test_a_healthy_allocation_is_fit() -> None:
    client, runner = _client("gpu-4\ngpu-7\n")
    assert allocation.check({"SLURM_JOB_NODELIST": "gpu-[4,7]"}, client) is None
    assert ["scontrol", "show", "hostnames", "gpu-[4,7]"] in runner.calls


def test_a_drained_or_draining_node_of_the_job_is_named_with_its_reason() -> None:
    client, _ = _client("gpu-2\ngpu-4\n")
    reason = allocation.check({"SLURM_JOB_NODELIST": "gpu-[2,4]"}, client)
    assert reason == "node gpu-2 is drng (megahour:remap_pending gpu=0)"


def test_down_and_not_responding_nodes_are_unfit_and_listed_once() -> None:
    states = parse_sinfo_nodes(SINFO).items
    unfit = allocation.unfit_nodes(["gpu-1", "gpu-8", "gpu-9", "gpu-7"], states)
    # gpu-1 is printed twice by sinfo (two partitions); gpu-9 is powered down but idle~, which can start
    assert [n.name for n in unfit] == ["gpu-1", "gpu-8"]


def test_nodes_outside_the_job_do_not_matter() -> None:
    client, _ = _client("gpu-7\n")
    assert allocation.check({"SLURM_JOB_NODELIST": "gpu-7"}, client) is None


def test_an_unreadable_state_fails_closed() -> None:
    client, _ = _client("gpu-4\n", sinfo_rc=1)
    reason = allocation.check({"SLURM_JOB_NODELIST": "gpu-4"}, client)
    assert reason is not None and reason.startswith("could not read the state of the job's nodes")


def test_outside_a_slurm_job_there_is_nothing_to_judge() -> None:
    def never(*args, **kwargs):  # pragma: no cover - must not run
        raise AssertionError("no Slurm command outside a job")

    assert allocation.check({}, SlurmClient(runner=never)) is None


def test_hostnames_expands_through_scontrol() -> None:
    def runner(argv, **kwargs):
        return subprocess.CompletedProcess(argv, 0, "a-1\na-2\n", "")

    assert SlurmClient(runner=runner).hostnames("a-[1-2]") == ["a-1", "a-2"]
