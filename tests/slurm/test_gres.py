"""GPU allocation parsers and queries, on real output (captures/SOURCES.md says where each file is from)."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from megahour.slurm.client import SlurmClient, SlurmQueryError
from megahour.slurm.parse import (
    GresItem,
    JobGpus,
    NodeGres,
    gpu_count,
    gpu_indices,
    job_holds_resources,
    json_errors,
    parse_gres,
    parse_sinfo_gres_json,
    parse_squeue_gpus_json,
    parse_sstat_job_ids,
    tres_gpus,
)
from tests.slurm.fixtures import FakeRunner, capture


def _node(name: str) -> NodeGres:
    parsed = parse_sinfo_gres_json(capture(name))
    assert parsed.complete, parsed.skipped
    (node,) = parsed.items
    return node


def _jobs(name: str) -> list[JobGpus]:
    parsed = parse_squeue_gpus_json(capture(name))
    assert parsed.complete, parsed.skipped
    return parsed.items


# sinfo --json (Debian 12, Slurm 22.05.8) -----------------------------------------------------------


def test_mixed_node_counts_configured_and_allocated_gpus():
    assert _node("sinfo-mixed.json") == NodeGres(
        name="gpu-1",
        state="mixed",
        flags=frozenset(),
        gpus=4,
        gpus_used=3,
        used_indices=frozenset({0, 1, 2}),
        gpus_alloc_tres=None,  # no gres/gpu TRES on the capture's cluster (no slurmdbd)
    )


def test_a_node_with_only_suspended_jobs_is_idle_and_still_counts_their_gpus():
    node = _node("sinfo-suspended.json")
    assert node.is_idle and node.gpus_allocated == 3 and node.used_indices == {0, 1, 2}


def test_state_flags_and_a_completing_jobs_gpus_already_released():
    assert _node("sinfo-draining.json").flags == {"DRAIN"}
    completing = _node("sinfo-completing.json")
    assert completing.flags == {"COMPLETING"}
    assert completing.gpus_used == 1 and completing.used_indices == {2}


def test_idle_node_without_allocation():
    node = _node("sinfo-idle.json")
    assert node.is_idle and node.gpus_allocated == 0 and node.used_indices == frozenset()


def test_alloc_tres_is_read_when_gres_gpu_is_a_tracked_tres():
    # Derived from a real capture: the two fields as megahour's slurm.conf (AccountingStorageTRES=gres/gpu)
    # makes Slurm print them; the count view (2) wins over the bitmap view (0).
    data = json.loads(capture("sinfo-idle.json"))
    data["nodes"][0]["tres"] += ",gres/gpu=4"
    data["nodes"][0]["tres_used"] = "cpu=1,gres/gpu=2"
    (node,) = parse_sinfo_gres_json(json.dumps(data)).items
    assert node.gpus_used == 0 and node.gpus_alloc_tres == 2 and node.gpus_allocated == 2
    data["nodes"][0]["tres_used"] = None  # what 22.05 prints for a node with nothing allocated
    (node,) = parse_sinfo_gres_json(json.dumps(data)).items
    assert node.gpus_alloc_tres == 0


def test_newer_slurm_state_lists_are_understood():
    data = json.loads(capture("sinfo-draining.json"))
    data["nodes"][0]["state"] = ["MIXED", "DRAIN"]
    del data["nodes"][0]["state_flags"]
    (node,) = parse_sinfo_gres_json(json.dumps(data)).items
    assert node.state == "mixed" and node.flags == {"DRAIN"}


@pytest.mark.parametrize(
    "broken",
    [
        {"name": "gpu-2", "state": "idle", "gres": "gpu:h100:4", "gres_used": "gpu:h100:x(IDX:0)"},
        {"name": "gpu-2", "state": None, "gres": "gpu:h100:4", "gres_used": "gpu:h100:0(IDX:N/A)"},
        {"state": "idle", "gres": "gpu:h100:4"},
        "gpu-2",
    ],
)
def test_unreadable_node_entries_make_the_answer_incomplete(broken):
    data = json.loads(capture("sinfo-mixed.json"))
    data["nodes"].append(broken)
    parsed = parse_sinfo_gres_json(json.dumps(data))
    assert [n.name for n in parsed.items] == ["gpu-1"]
    assert not parsed.complete


@pytest.mark.parametrize("text", ["", "sinfo: error: unknown option --json", '{"nodes": 3}', "[]"])
def test_non_json_answers_are_skipped_not_raised(text):
    parsed = parse_sinfo_gres_json(text)
    assert parsed.items == [] and not parsed.complete


# squeue --json ---------------------------------------------------------------------------------------


def test_running_jobs_gpus_per_node_and_finished_or_pending_jobs_left_out():
    jobs = _jobs("squeue-mixed.json")
    assert [(j.job_id, j.state, j.node, j.gpus, j.indices) for j in jobs] == [
        ("7", "RUNNING", "gpu-1", 2, frozenset({0, 1})),
        # Job 8's name is "eval b=1": free text that JSON keeps apart from the fields.
        ("8", "RUNNING", "gpu-1", 1, frozenset({2})),
        ("9", "RUNNING", "gpu-1", 0, frozenset()),
    ]
    # sbatch jobs, with the start time 22.05 prints as epoch seconds (what the phantom check reads).
    assert all(j.batch for j in jobs)
    raw = {str(j["job_id"]): j["start_time"] for j in json.loads(capture("squeue-mixed.json"))["jobs"]}
    assert all(j.start_time == datetime.fromtimestamp(raw[j.job_id]) for j in jobs)


def test_sstat_lists_the_jobs_whose_batch_step_a_node_runs():
    # `sstat --noheader --parsable2 --format JobID --jobs 8.batch,9.batch` on the faults cluster, where job 8
    # was a phantom (a controller restored from an older state): only the live job's step is printed.
    assert parse_sstat_job_ids("9.batch\n") == {"9"}
    assert parse_sstat_job_ids("") == set()


def test_suspended_jobs_hold_their_gpus():
    assert [(j.job_id, j.state, j.gpus) for j in _jobs("squeue-suspended.json")] == [
        ("7", "SUSPENDED", 2),
        ("8", "SUSPENDED", 1),
        ("9", "SUSPENDED", 0),
    ]


def test_a_completing_job_without_gres_detail_holds_nothing():
    jobs = {j.job_id: j for j in _jobs("squeue-completing.json")}
    assert jobs["7"] == JobGpus("7", "COMPLETING", "gpu-1", 0, frozenset())
    assert jobs["8"].gpus == 1


def test_only_finished_jobs_left():
    assert _jobs("squeue-idle.json") == []


def test_a_running_job_that_asks_for_gpus_without_detail_is_unknown_on_its_nodes():
    data = json.loads(capture("squeue-mixed.json"))
    job7 = next(j for j in data["jobs"] if j["job_id"] == 7)
    job7["gres_detail"] = []
    parsed = parse_squeue_gpus_json(json.dumps(data))
    assert parsed.complete
    assert JobGpus("7", "RUNNING", "gpu-1", None, None) in parsed.items


def test_multi_node_jobs_pair_gres_detail_with_allocated_nodes_in_order():
    # Derived: the capture's cluster has one node; a two-node job prints one detail per node, in the
    # order of job_resources.allocated_nodes (openapi v0.0.38 jobs.c; scontrol -d pairs them the same way).
    data = json.loads(capture("squeue-mixed.json"))
    job7 = next(j for j in data["jobs"] if j["job_id"] == 7)
    second = dict(job7["job_resources"]["allocated_nodes"][0], nodename="gpu-2")
    job7["job_resources"]["allocated_nodes"].append(second)
    job7["job_resources"]["nodes"] = job7["nodes"] = "gpu-[1-2]"
    job7["gres_detail"] = ["gpu:h100:2(IDX:0-1)", "gpu:h100:4(IDX:0-3)"]
    parsed = parse_squeue_gpus_json(json.dumps(data))
    assert [(j.node, j.gpus) for j in parsed.items if j.job_id == "7"] == [("gpu-1", 2), ("gpu-2", 4)]
    job7["gres_detail"] = ["gpu:h100:2(IDX:0-1)"]
    parsed = parse_squeue_gpus_json(json.dumps(data))
    assert not parsed.complete and not [j for j in parsed.items if j.job_id == "7"]


def test_unreadable_jobs_make_the_answer_incomplete():
    data = json.loads(capture("squeue-mixed.json"))
    next(j for j in data["jobs"] if j["job_id"] == 8)["gres_detail"] = ["gpu:h100:1(IDX:two)"]
    data["jobs"].append({"job_state": "RUNNING", "nodes": "gpu-1"})
    data["jobs"].append({"job_id": 99, "job_state": "RUNNING", "nodes": "gpu-[1"})
    parsed = parse_squeue_gpus_json(json.dumps(data))
    assert len(parsed.skipped) == 3
    assert {j.job_id for j in parsed.items} == {"7", "9"}


@pytest.mark.parametrize(
    ("state", "holds"),
    [
        ("RUNNING", True),
        ("SUSPENDED", True),
        ("CONFIGURING", True),
        ("COMPLETING", True),
        ("REQUEUED", True),
        ("SOME_NEW_STATE", True),
        ("PENDING", False),
        ("CANCELLED", False),
        ("COMPLETED", False),
        ("COMPLETED+COMPLETING", True),  # 23.11+ prints a list of states
    ],
)
def test_which_job_states_may_hold_gpus(state, holds):
    assert job_holds_resources(state) is holds


# Slurm's errors: exit 0 with an "errors" list ------------------------------------------------------


@pytest.mark.parametrize("name", ["sinfo-controller-down.json", "squeue-controller-down.json"])
def test_controller_down_answers_carry_errors(name):
    assert json_errors(capture(name))
    parser = parse_sinfo_gres_json if name.startswith("sinfo") else parse_squeue_gpus_json
    parsed = parser(capture(name))
    assert parsed.items == [] and not parsed.complete


def test_client_raises_on_errors_although_the_command_exited_0():
    runner = FakeRunner(
        {
            "sinfo --json": (capture("sinfo-controller-down.json"), "", 0),
            "squeue --json": (capture("squeue-controller-down.json"), "", 0),
        }
    )
    client = SlurmClient(runner=runner)
    with pytest.raises(SlurmQueryError, match="Unspecified error"):
        client.node_gres()
    with pytest.raises(SlurmQueryError, match="slurm_load_jobs"):
        client.job_gpus()


def test_client_runs_the_exact_commands():
    runner = FakeRunner(
        {
            "sinfo --json": (capture("sinfo-mixed.json"), "", 0),
            "squeue --json": (capture("squeue-mixed.json"), "", 0),
            "scontrol reconfigure": ("", "", 0),
        }
    )
    client = SlurmClient(runner=runner, timeout=7)
    assert [n.name for n in client.node_gres().items] == ["gpu-1"]
    assert len(client.job_gpus().items) == 3
    client.reconfigure()
    assert runner.calls == [["sinfo", "--json"], ["squeue", "--json"], ["scontrol", "reconfigure"]]
    assert all(kwargs["timeout"] == 7 for kwargs in runner.kwargs)


# GRES and TRES strings -------------------------------------------------------------------------------


def test_the_text_formats_print_the_same_gres_strings_as_the_json():
    """Debian 22.05's text output (scontrol -d -o, sinfo -O) holds the very strings the JSON has."""
    node = json.loads(capture("sinfo-mixed.json"))["nodes"][0]
    show_node = capture("scontrol-show-node-d-oneliner-mixed.txt")
    assert f" Gres={node['gres']} " in show_node and f" GresUsed={node['gres_used']} " in show_node
    assert capture("sinfo-N-O-gres-mixed.txt") == f"gpu-1|mix|{node['gres']}|{node['gres_used']}|\n"
    jobs = {j["job_id"]: j for j in json.loads(capture("squeue-mixed.json"))["jobs"]}
    for line in capture("scontrol-show-job-d-oneliner-mixed.txt").splitlines():
        job_id = int(line.split()[0].removeprefix("JobId="))
        for detail in jobs[job_id]["gres_detail"]:
            assert " Nodes=gpu-1 CPU_IDs=" in line and f" GRES={detail} " in line


def test_real_gres_used_column_of_an_older_slurm():
    lines = capture("public-labshare-114-sinfo-gresused.txt").splitlines()[1:]
    cells = [line.split()[0] for line in lines]
    parsed = [parse_gres(c) for c in cells]
    assert all(p is not None for p in parsed)
    assert [gpu_count(p or []) for p in parsed] == [2, 3, 4, 1, 3, 2, 0]
    mixed = parsed[5] or []
    assert [(i.type, i.count) for i in mixed] == [("1080ti", 1), ("980gtx", 1)]
    assert gpu_indices(mixed) == {0, 1}
    assert gpu_indices(parsed[6] or []) == frozenset()


def test_tres_strings_from_public_output():
    show_node = capture("public-awsome-distributed-ai-195-scontrol-show-node.txt")
    fields = dict(line.strip().split("=", 1) for line in show_node.splitlines() if "TRES=" in line)
    assert tres_gpus(fields["CfgTRES"]) == 1
    assert tres_gpus(fields["AllocTRES"]) is None  # empty: nothing allocated
    tres_alloc = capture("public-ood-core-870-squeue-tres-alloc.txt").splitlines()[-1]
    assert tres_gpus(tres_alloc) == 1  # gres/gpu is the total, gres/gpu:a100 a part of it
    assert tres_gpus("cpu=2,gres/gpu:a100=2,gres/gpu:v100=1") == 3
    assert tres_gpus("cpu=8,mem=12052M,billing=8") is None


@pytest.mark.parametrize(
    ("text", "items"),
    [
        ("gpu:h100:4(S:0-1)", [GresItem("gpu", "h100", 4)]),
        ("gpu:2", [GresItem("gpu", None, 2)]),
        ("gpu", [GresItem("gpu", None, 1)]),
        ("gpu:h100:2(IDX:0,3)", [GresItem("gpu", "h100", 2, frozenset({0, 3}))]),
        ("gpu:h100:0(IDX:N/A)", [GresItem("gpu", "h100", 0, frozenset())]),
        ("(null)", []),
        ("", []),
        (
            "mps:200(100/100,0/100),gpu:1(IDX:1)",
            [GresItem("mps", None, 200), GresItem("gpu", None, 1, frozenset({1}))],
        ),
    ],
)
def test_gres_strings(text, items):
    assert parse_gres(text) == items


@pytest.mark.parametrize(
    "text",
    ["gpu:h100:2(IDX:0-1", "gpu::2", "gpu:a:b:2", "gpu:h100:2(IDX:3-1)", "gpu h100:2", "gpu:1(IDX:99999)"],
)
def test_unreadable_gres_strings(text):
    assert parse_gres(text) is None
