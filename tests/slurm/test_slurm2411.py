"""Every Slurm reader on real Slurm 24.11.5 output (Debian 13; captures/SOURCES.md, the slurm2411-* files)."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from megahour.slurm.client import SlurmClient, SlurmQueryError
from megahour.slurm.comment import stamps_from_show_node
from megahour.slurm.jobs import (
    LiveJob,
    parse_sbatch_job_id,
    parse_scontrol_job,
    parse_squeue_jobs,
    scontrol_job_args,
    squeue_by_name_args,
)
from megahour.slurm.parse import (
    NODES_JSON_ARGS,
    RESERVATIONS_ARGS,
    SINFO_GROUPED,
    SINFO_JSON_ARGS,
    SINFO_NODES_ARGS,
    SQUEUE_JSON_ARGS,
    SQUEUE_RUNNING_ARGS,
    SSTAT_BATCH_ARGS,
    JobGpus,
    NodeGres,
    NodeState,
    RunningJob,
    json_errors,
    parse_gres,
    parse_nodes_gres_json,
    parse_reservations,
    parse_sinfo_gres_json,
    parse_sinfo_nodes,
    parse_squeue_gpus_json,
    parse_squeue_running,
    parse_sstat_job_ids,
    sinfo_json_grouped,
)
from tests.slurm.fixtures import FakeRunner, capture

STATES = ("idle", "mixed", "draining", "drained")
DRAIN_REASON = "megahour:ecc test"
DRAINED_AT = datetime(2026, 12, 2, 9, 10, 32)  # as sinfo prints it (SLURM_TIME_FORMAT=standard)


def _cap(name: str) -> str:
    return capture(f"slurm2411-{name}")


def _node(state: str) -> NodeGres:
    parsed = parse_nodes_gres_json(_cap(f"scontrol-show-nodes-{state}.json"))
    assert parsed.complete, parsed.skipped
    (node,) = parsed.items
    return node


def _epoch_local(number: int) -> datetime:
    return datetime.fromtimestamp(number)


# The captures are what SOURCES.md says ----------------------------------------------------------------


def test_the_captures_come_from_slurm_24_11():
    assert _cap("sinfo-version.txt") == "slurm-wlm 24.11.5\n"
    for name in ("scontrol-show-nodes-mixed.json", "squeue-mixed.json", "sinfo-mixed.json"):
        meta = json.loads(_cap(name))["meta"]
        assert (
            meta["slurm"]["release"] == "24.11.5" and meta["plugin"]["data_parser"] == "data_parser/v0.0.42"
        )


# Nodes: scontrol show nodes --json (the per-node list) ---------------------------------------------------


def test_scontrol_nodes_json_gives_each_nodes_gpus():
    assert _node("idle") == NodeGres("s2411", "idle", frozenset(), 2, 0, frozenset(), None)
    assert _node("mixed") == NodeGres("s2411", "mixed", frozenset(), 2, 1, frozenset({0}), None)
    assert _node("draining") == NodeGres("s2411", "mixed", frozenset({"DRAIN"}), 2, 1, frozenset({0}), None)
    assert _node("drained") == NodeGres("s2411", "idle", frozenset({"DRAIN"}), 2, 0, frozenset(), None)


def test_the_old_name_reads_the_same():
    text = _cap("scontrol-show-nodes-mixed.json")
    assert parse_sinfo_gres_json(text) == parse_nodes_gres_json(text)


def test_alloc_tres_on_a_24_11_node_entry():
    # Derived from the real capture: what 24.11 prints with AccountingStorageTRES=gres/gpu (megahour's
    # slurm.conf, with slurmdbd; the capture's cluster had none, see SOURCES.md).
    data = json.loads(_cap("scontrol-show-nodes-mixed.json"))
    data["nodes"][0]["tres"] += ",gres/gpu=2"
    data["nodes"][0]["tres_used"] = "cpu=1,gres/gpu=2"
    (node,) = parse_nodes_gres_json(json.dumps(data)).items
    assert node.gpus_used == 1 and node.gpus_alloc_tres == 2 and node.gpus_allocated == 2


def test_the_text_outputs_agree_with_the_json():
    (node,) = json.loads(_cap("scontrol-show-nodes-mixed.json"))["nodes"]
    line = _cap("scontrol-show-node-s2411-oneliner-mixed.txt")
    assert f" Gres={node['gres']} " in line and "State=MIXED " in line
    # 24.11's scontrol show node prints no GresUsed without -d: only the JSON has the use.
    assert "GresUsed=" not in line and parse_gres(node["gres_used"]) is not None
    drained = json.loads(_cap("scontrol-show-nodes-draining.json"))["nodes"][0]
    (text,) = parse_sinfo_nodes(_cap("sinfo-nodes-format-draining.txt")).items
    assert drained["reason"] == text.reason == DRAIN_REASON
    assert drained["reason_set_by_user"] == text.reason_user == "root"
    # sinfo prints the controller's local time, which was UTC in the container.
    changed = datetime.fromtimestamp(drained["reason_changed_at"]["number"], UTC).replace(tzinfo=None)
    assert changed == text.reason_time == DRAINED_AT


# Nodes: sinfo --json is grouped since 23.02 -------------------------------------------------------------


@pytest.mark.parametrize("state", STATES)
def test_grouped_sinfo_json_is_refused_with_the_fix_named(state):
    text = _cap(f"sinfo-{state}.json")
    assert sinfo_json_grouped(text)
    parsed = parse_nodes_gres_json(text)
    assert parsed.items == [] and parsed.skipped == [SINFO_GROUPED]
    assert "\n" not in SINFO_GROUPED and "scontrol show nodes --json" in SINFO_GROUPED


def test_per_node_lists_are_not_grouped():
    assert not sinfo_json_grouped(capture("sinfo-mixed.json"))  # 22.05's sinfo --json
    assert not sinfo_json_grouped(_cap("scontrol-show-nodes-mixed.json"))
    for text in ("", "[]", '{"sinfo": 3}', "sinfo: error"):
        assert not sinfo_json_grouped(text)


# The client: which command lists the nodes ---------------------------------------------------------------


def _runner_2411(**overrides) -> FakeRunner:
    answers = {
        "sinfo --json": (_cap("sinfo-mixed.json"), "", 0),
        "scontrol show nodes --json": (_cap("scontrol-show-nodes-mixed.json"), "", 0),
        "squeue --json": (_cap("squeue-mixed.json"), "", 0),
    }
    answers.update(overrides)
    return FakeRunner(answers)


def test_client_turns_to_scontrol_once_sinfo_answers_grouped():
    runner = _runner_2411()
    client = SlurmClient(runner=runner)
    assert client.node_gres_args == SINFO_JSON_ARGS
    first = client.node_gres()
    assert first.complete and first.items == [_node("mixed")]
    assert client.node_gres_args == NODES_JSON_ARGS
    assert client.node_gres().items == first.items  # scontrol alone from then on
    assert runner.calls == [list(SINFO_JSON_ARGS), list(NODES_JSON_ARGS), list(NODES_JSON_ARGS)]


def test_client_keeps_sinfo_on_22_05():
    runner = FakeRunner({"sinfo --json": (capture("sinfo-mixed.json"), "", 0)})
    client = SlurmClient(runner=runner)
    assert [n.name for n in client.node_gres().items] == ["gpu-1"]
    assert [n.name for n in client.node_gres().items] == ["gpu-1"]
    assert runner.calls == [list(SINFO_JSON_ARGS)] * 2 and client.node_gres_args == SINFO_JSON_ARGS


@pytest.mark.parametrize(
    ("prefix", "call"),
    [
        ("sinfo --json", SlurmClient.node_gres),
        ("scontrol show nodes --json", SlurmClient.node_gres),
        ("squeue --json", SlurmClient.job_gpus),
    ],
)
def test_controller_down_exits_1_with_nothing_on_stdout(prefix, call):
    stderr = _cap(prefix.replace(" --json", "").replace(" ", "-") + "-controller-down.stderr.txt")
    assert "Unable to contact slurm controller" in stderr
    runner = _runner_2411(**{prefix: ("", stderr, 1)})
    client = SlurmClient(runner=runner)
    if prefix.startswith("scontrol"):
        client.node_gres_args = NODES_JSON_ARGS
    with pytest.raises(SlurmQueryError, match=r"exited 1: slurm_load_.*Unable to contact") as raised:
        call(client)
    assert raised.value.returncode == 1


def test_24_11_answers_carry_no_errors():
    for name in ("sinfo-mixed.json", "scontrol-show-nodes-mixed.json", "squeue-mixed.json"):
        assert json_errors(_cap(name)) == []


# Jobs: squeue --json ---------------------------------------------------------------------------------


def test_running_job_gpus_from_the_allocation_list():
    parsed = parse_squeue_gpus_json(_cap("squeue-mixed.json"))
    assert parsed.complete, parsed.skipped
    # Job 2 pends (gres/gpu:h100:2 while one GPU is free): it holds nothing and is left out.
    assert parsed.items == [JobGpus("1", "RUNNING", "s2411", 1, frozenset({0}))]
    (job,) = parsed.items
    raw = next(j for j in json.loads(_cap("squeue-mixed.json"))["jobs"] if j["job_id"] == 1)
    assert raw["job_resources"]["nodes"]["allocation"][0]["name"] == "s2411"  # what is read
    assert job.batch and job.start_time == _epoch_local(raw["start_time"]["number"])


@pytest.mark.parametrize("state", ["idle", "drained"])
def test_no_running_job_no_gpus(state):
    parsed = parse_squeue_gpus_json(_cap(f"squeue-{state}.json"))
    assert parsed.complete and parsed.items == []


def _job1() -> tuple[dict, dict]:
    data = json.loads(_cap("squeue-mixed.json"))
    return data, next(j for j in data["jobs"] if j["job_id"] == 1)


def test_multi_node_jobs_pair_gres_detail_with_the_allocation_list_in_order():
    # Derived: the capture's cluster has one node; a two-node job lists one allocation and one GRES detail
    # per node, both in the order of the job's node list (data_parser v0.0.42 JOB_RES_NODES).
    data, job = _job1()
    allocation = job["job_resources"]["nodes"]["allocation"]
    allocation.append(dict(copy.deepcopy(allocation[0]), index=1, name="s2412"))
    job["job_resources"]["nodes"].update(count=2, list="s[2411-2412]")
    job["nodes"] = "s[2411-2412]"
    job["gres_detail"] = ["gpu:h100:1(IDX:0)", "gpu:h100:2(IDX:0-1)"]
    parsed = parse_squeue_gpus_json(json.dumps(data))
    assert [(j.node, j.gpus) for j in parsed.items] == [("s2411", 1), ("s2412", 2)]


@pytest.mark.parametrize(
    "allocation",
    [
        [{"index": 0}],  # an entry naming no node
        [{"index": 0, "name": ""}],
        ["s2411"],
        {"name": "s2411"},  # not a list
    ],
)
def test_an_allocation_list_that_cannot_be_mapped_is_loud(allocation):
    data, job = _job1()
    job["job_resources"]["nodes"]["allocation"] = allocation
    parsed = parse_squeue_gpus_json(json.dumps(data))
    assert parsed.items == []
    (note,) = parsed.skipped
    assert note.startswith("job 1 (RUNNING): unreadable node list") and "\n" not in note


def test_without_an_allocation_list_the_hostlist_is_read():
    # Slurm leaves the allocation list empty when it has no per-node detail (JOB_RES_NODES).
    data, job = _job1()
    job["job_resources"]["nodes"]["allocation"] = []
    parsed = parse_squeue_gpus_json(json.dumps(data))
    assert parsed.complete and [(j.node, j.gpus) for j in parsed.items] == [("s2411", 1)]


# The text commands -----------------------------------------------------------------------------------


def test_sinfo_node_lines():
    assert parse_sinfo_nodes(_cap("sinfo-nodes-format-mixed.txt")).items == [
        NodeState("s2411", "mix", None, None, None)
    ]
    draining = parse_sinfo_nodes(_cap("sinfo-nodes-format-draining.txt"))
    drained = parse_sinfo_nodes(_cap("sinfo-nodes-format-drained.txt"))
    assert draining.complete and drained.complete
    assert draining.items == [NodeState("s2411", "drng", DRAIN_REASON, DRAINED_AT, "root")]
    assert drained.items == [NodeState("s2411", "drain", DRAIN_REASON, DRAINED_AT, "root")]
    assert draining.items[0].is_draining and drained.items[0].is_idle_drained


def test_squeue_running_and_by_name():
    assert parse_squeue_running(_cap("squeue-running-format-mixed.txt")).items == [RunningJob("1", "s2411")]
    assert parse_squeue_jobs(_cap("squeue-by-name-mixed.txt")) == [LiveJob("1", "RUNNING")]


def test_reservations():
    assert parse_reservations(_cap("scontrol-show-reservation-none.txt")).complete
    assert parse_reservations(_cap("scontrol-show-reservation-none.txt")).items == []
    parsed = parse_reservations(_cap("scontrol-show-reservation.txt"))
    assert parsed.complete
    (resv,) = parsed.items
    assert (resv.name, resv.nodes, resv.users, resv.state) == (
        "megahour-maint-1",
        "s2411",
        ("root",),
        "INACTIVE",
    )
    assert resv.flags == {"MAINT", "IGNORE_JOBS", "SPEC_NODES"}
    assert resv.start_time == datetime(2026, 12, 2, 10, 11, 13) and resv.end_time == datetime(
        2026, 12, 2, 11, 11, 13
    )


def test_job_commands():
    assert parse_sbatch_job_id(_cap("sbatch-parsable.txt")) == "1"
    status = parse_scontrol_job(_cap("scontrol-show-job-oneliner-mixed.txt"))
    assert status is not None
    assert (status.job_id, status.state, status.exit_code, status.signal) == ("1", "RUNNING", 0, 0)
    assert status.stdout == "/cap/slurm-1.out" and not status.finished
    assert parse_sstat_job_ids(_cap("sstat-batch-mixed.txt")) == {"1"}


def test_health_stamp_in_the_node_comment():
    stamps = stamps_from_show_node(_cap("scontrol-show-node-s2411-oneliner-mixed.txt"))
    assert stamps["s2411"].status == "PASS" and int(stamps["s2411"].at.timestamp()) == 1796202000
    (node,) = json.loads(_cap("scontrol-show-nodes-mixed.json"))["nodes"]
    assert node["comment"] == stamps["s2411"].render()


def test_the_commands_are_the_ones_captured():
    # SOURCES.md records each capture's command line; these are the client's.
    assert SINFO_NODES_ARGS == ("sinfo", "--noheader", "--Node", "--format", "%N|%t|%E|%H|%u")
    assert SQUEUE_RUNNING_ARGS == (
        "squeue",
        "--noheader",
        "--states=RUNNING,COMPLETING",
        "--format",
        "%i|%N|%R",
    )
    assert RESERVATIONS_ARGS == ("scontrol", "show", "reservation", "--oneliner")
    assert squeue_by_name_args("cap-gpu") == [
        "squeue",
        "--noheader",
        "--name",
        "cap-gpu",
        "--states",
        "PENDING,RUNNING,CONFIGURING,SUSPENDED,REQUEUED",
        "--format",
        "%i|%T",
    ]
    assert SSTAT_BATCH_ARGS == ("sstat", "--noheader", "--parsable2", "--format", "JobID", "--jobs")
    # Captured as `scontrol show job 1 --oneliner`; on the capture's cluster both orders printed the same
    # (and `scontrol show node --oneliner`, the client's show_nodes, the same as `... node s2411 ...`).
    assert scontrol_job_args("1") == ["scontrol", "show", "job", "--oneliner", "1"]
    assert NODES_JSON_ARGS == ("scontrol", "show", "nodes", "--json") and SQUEUE_JSON_ARGS == (
        "squeue",
        "--json",
    )


# Properties ------------------------------------------------------------------------------------------

_junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.text(max_size=12),
    st.sampled_from(["gpu:h100:2", "gpu:h100:1(IDX:0)", "N/A", "(null)", "gpu:h100:x", ["MIXED", "DRAIN"]]),
    st.lists(st.text(max_size=6), max_size=3),
)
_NODE_FIELDS = ["name", "state", "gres", "gres_used", "tres", "tres_used"]


@settings(max_examples=200)
@given(
    st.lists(
        st.tuples(st.sampled_from(STATES), st.dictionaries(st.sampled_from(_NODE_FIELDS), _junk, max_size=3)),
        max_size=6,
    )
)
def test_every_node_entry_is_an_item_or_a_note(entries):
    """Real 24.11 node entries, some fields replaced with anything: never raises, never drops a node."""
    nodes = []
    for i, (state, changes) in enumerate(entries):
        (node,) = json.loads(_cap(f"scontrol-show-nodes-{state}.json"))["nodes"]
        node["name"] = f"s{i}"
        node.update(changes)
        nodes.append(node)
    data = json.loads(_cap("scontrol-show-nodes-idle.json"))
    data["nodes"] = nodes
    parsed = parse_nodes_gres_json(json.dumps(data))
    assert len(parsed.items) + len(parsed.skipped) == len(nodes)
    for item in parsed.items:
        assert item.gpus >= 0 and item.gpus_allocated >= 0 and item.name in [n["name"] for n in nodes]


@settings(max_examples=200)
@given(
    allocation=st.one_of(
        _junk,
        st.lists(
            st.one_of(
                _junk,
                st.fixed_dictionaries(
                    {"name": st.one_of(_junk, st.from_regex(r"s[0-9]{1,3}", fullmatch=True))}
                ),
            ),
            max_size=4,
        ),
    ),
    details=st.one_of(
        _junk, st.lists(st.sampled_from(["gpu:h100:1(IDX:0)", "gpu:h100:2(IDX:0-1)", "x"]), max_size=4)
    ),
)
def test_a_running_job_is_never_dropped_silently(allocation, details):
    """The real running job with its allocation list and GRES detail replaced: its nodes are read, or a note
    names it; it never just vanishes (that would make its GPUs look unheld)."""
    data, job = _job1()
    job["job_resources"]["nodes"]["allocation"] = allocation
    job["gres_detail"] = details
    parsed = parse_squeue_gpus_json(json.dumps(data))
    named = [n for n in parsed.skipped if n.startswith("job 1 ")]
    assert [j for j in parsed.items if j.job_id == "1"] or named
    assert all("\n" not in n for n in parsed.skipped)


@settings(max_examples=100)
@given(st.lists(st.dictionaries(st.text(max_size=8), _junk, max_size=4), max_size=4))
def test_any_grouped_sinfo_answer_is_refused(records):
    data = json.loads(_cap("sinfo-mixed.json"))
    data["sinfo"] = records
    parsed = parse_nodes_gres_json(json.dumps(data))
    assert parsed.items == [] and parsed.skipped == [SINFO_GROUPED]
