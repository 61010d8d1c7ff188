from __future__ import annotations

from datetime import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from megahour.slurm.parse import (
    MAX_HOSTLIST_NAMES,
    NodeState,
    expand_hostlist,
    parse_hostlist,
    parse_reservations,
    parse_sinfo_nodes,
    parse_squeue_running,
)
from tests.slurm.fixtures import NO_RESERVATIONS, RESERVATIONS, SINFO, SQUEUE


def _node(state: str) -> NodeState:
    return NodeState("n", state, None, None, None)


# sinfo ------------------------------------------------------------------------


def test_sinfo_nodes_are_parsed_and_deduplicated_across_partitions():
    parsed = parse_sinfo_nodes(SINFO)
    assert parsed.skipped == []
    names = [n.name for n in parsed.items]
    assert names == ["ctl", "gpu-1", "gpu-2", "gpu-3", "gpu-4", "gpu-5", "gpu-6", "gpu-7", "gpu-8", "gpu-9"]
    gpu1 = parsed.items[1]
    assert gpu1 == NodeState(
        name="gpu-1",
        state="drain",
        reason="megahour:ecc_volatile_uncorrected gpu=3 count=2",
        reason_time=datetime(2026, 11, 29, 13, 42, 29),
        reason_user="root",
    )
    ctl = parsed.items[0]
    assert ctl.reason is None and ctl.reason_time is None and ctl.reason_user is None


def test_sinfo_reason_may_contain_the_separator():
    parsed = parse_sinfo_nodes("gpu-1|drain|fan|psu swap (ticket 9|2)|2026-11-29T13:42:29|admin\n")
    assert parsed.skipped == []
    (node,) = parsed.items
    assert node.reason == "fan|psu swap (ticket 9|2)"
    assert node.reason_time == datetime(2026, 11, 29, 13, 42, 29)
    assert node.reason_user == "admin"


def test_sinfo_unparseable_lines_are_skipped_not_raised():
    text = "garbage\ngpu-1|drain\n|idle|none|Unknown|Unknown\nNODELIST|STATE|REASON|TIMESTAMP|USER\n" + SINFO
    parsed = parse_sinfo_nodes(text)
    assert len(parsed.skipped) == 4
    assert not parsed.complete
    assert len(parsed.items) == 10


def test_sinfo_bad_timestamp_means_unknown_time():
    (node,) = parse_sinfo_nodes("gpu-1|drain|megahour:disk_full|yesterday|root\n").items
    assert node.reason_time is None


@pytest.mark.parametrize(
    ("state", "drained", "idle_drained", "draining", "not_responding"),
    [
        ("drain", True, True, False, False),
        ("drain*", True, True, False, True),
        ("drain~", True, True, False, False),
        ("drain@", True, True, False, False),
        ("drng", True, False, True, False),
        ("drng*", True, False, True, True),
        ("idle", False, False, False, False),
        ("idle*", False, False, False, True),
        ("mix-", False, False, False, False),
        ("alloc", False, False, False, False),
        ("down*", False, False, False, True),
        ("drained", True, True, False, False),
        ("draining", True, False, True, False),
    ],
)
def test_compact_state_properties(state, drained, idle_drained, draining, not_responding):
    node = _node(state)
    assert node.is_drained is drained
    assert node.is_idle_drained is idle_drained
    assert node.is_draining is draining
    assert node.not_responding is not_responding


# reservations -------------------------------------------------------------------


def test_reservations_are_parsed():
    parsed = parse_reservations(RESERVATIONS)
    assert parsed.skipped == []
    first, second, foreign = parsed.items
    assert first.name == "megahour-maint-1"
    assert first.start_time == datetime(2026, 11, 29, 14, 0, 0)
    assert first.end_time == datetime(2026, 11, 29, 15, 0, 0)
    assert first.nodes == "gpu-1"
    assert first.users == ("root",)
    assert first.flags == frozenset({"MAINT", "SPEC_NODES"})
    assert first.state == "ACTIVE"
    assert second.nodes == "gpu-[2,7]"
    assert foreign.users == ("alice", "bob")


def test_no_reservations_is_an_empty_complete_result():
    parsed = parse_reservations(NO_RESERVATIONS)
    assert parsed.items == [] and parsed.complete


def test_reservation_lines_without_a_name_are_skipped():
    parsed = parse_reservations(
        "StartTime=2026-11-29T14:00:00 Nodes=gpu-1\nnot a reservation\n" + RESERVATIONS
    )
    assert len(parsed.skipped) == 2
    assert len(parsed.items) == 3


def test_reservation_null_nodes_and_unknown_times():
    (res,) = parse_reservations(
        "ReservationName=megahour-x StartTime=Unknown EndTime=(null) Nodes=(null)"
    ).items
    assert res.nodes == "" and res.start_time is None and res.end_time is None and res.users == ()


# squeue ------------------------------------------------------------------------


def test_squeue_running_jobs():
    parsed = parse_squeue_running(SQUEUE)
    assert parsed.skipped == []
    assert [tuple(j) for j in parsed.items] == [
        ("4101", "gpu-[2,7]"),
        ("4102_3", "gpu-4"),
        ("4103", "gpu-[10-11]"),
    ]


def test_squeue_falls_back_to_reason_field_and_skips_jobs_without_nodes():
    parsed = parse_squeue_running("77||gpu-3\n78||(Resources)\n79|(null)|\nbroken line\n")
    assert [tuple(j) for j in parsed.items] == [("77", "gpu-3")]
    assert len(parsed.skipped) == 3


# hostlists ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("gpu-[1-3,5],ctl", ["gpu-1", "gpu-2", "gpu-3", "gpu-5", "ctl"]),
        ("node[01-03]", ["node01", "node02", "node03"]),
        ("node[08-10]", ["node08", "node09", "node10"]),
        ("node[8-10]", ["node8", "node9", "node10"]),
        ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
        ("ctl", ["ctl"]),
        ("a,,b", ["a", "b"]),
        ("", []),
        ("(null)", []),
        ("gpu-[1-2]-ib", ["gpu-1-ib", "gpu-2-ib"]),
    ],
)
def test_expand_hostlist(text, names):
    assert expand_hostlist(text) == names
    assert parse_hostlist(text).complete


@pytest.mark.parametrize(
    "text", ["gpu-[1-3", "gpu-1]", "gpu-[3-1]", "gpu-[a-b]", "gpu-[]", "n[[1]]", "n[1-2-3]"]
)
def test_bad_hostlists_are_reported_not_raised(text):
    parsed = parse_hostlist(text)
    assert parsed.skipped
    assert parsed.items == []


def test_bad_items_do_not_hide_good_ones():
    parsed = parse_hostlist("ctl,gpu-[3-1],gpu-[1-2]")
    assert parsed.items == ["ctl", "gpu-1", "gpu-2"]
    assert len(parsed.skipped) == 1


def test_hostlist_expansion_is_capped():
    assert len(expand_hostlist(f"n[1-{MAX_HOSTLIST_NAMES}]")) == MAX_HOSTLIST_NAMES
    for text in (
        f"n[0-{MAX_HOSTLIST_NAMES}]",
        "n[0-999999999999999999]",
        "a[0-999]b[0-999]",
        f"a[1-{MAX_HOSTLIST_NAMES}],b1",
        "n[" + "9" * 5000 + "]",
    ):
        parsed = parse_hostlist(text)
        assert parsed.skipped, text
        assert len(parsed.items) <= MAX_HOSTLIST_NAMES


# properties --------------------------------------------------------------------

# Text built from the tokens Slurm output is made of finds more edge cases than random unicode alone.
_TOKENS = [*"abgpu-01239|[],=:*~ \n\t()TZ.", "ReservationName=", "Nodes=", "drain", "2026-11-29T13:42:29"]
_slurmish = st.lists(st.sampled_from(_TOKENS), max_size=60).map("".join)


@settings(max_examples=300)
@given(st.one_of(st.text(), _slurmish))
def test_parsers_never_raise(text):
    for parse in (parse_sinfo_nodes, parse_reservations, parse_squeue_running):
        result = parse(text)
        assert isinstance(result.items, list) and isinstance(result.skipped, list)
    for node in parse_sinfo_nodes(text).items:
        assert node.name and "|" not in node.name
        _ = (node.is_drained, node.is_idle_drained, node.not_responding)


@settings(max_examples=300)
@given(
    st.one_of(st.text(), _slurmish, st.from_regex(r"[a-z]{1,3}(\[[0-9]{1,6}(-[0-9]{1,6})?(,[0-9]{1,3})*\])*"))
)
def test_expand_hostlist_never_raises_and_stays_bounded(text):
    parsed = parse_hostlist(text)
    assert len(parsed.items) <= MAX_HOSTLIST_NAMES
    assert expand_hostlist(text) == parsed.items


@given(st.lists(st.integers(min_value=0, max_value=500), min_size=1, max_size=20, unique=True))
def test_expand_hostlist_round_trips_listed_indices(indices):
    text = "gpu-[" + ",".join(str(i) for i in indices) + "]"
    assert expand_hostlist(text) == [f"gpu-{i}" for i in indices]
