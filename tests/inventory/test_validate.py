import pytest
from hypothesis import given
from hypothesis import strategies as st

from megahour.inventory.validate import group_findings, host_ranges, render_grouped, validate

GOOD_NODE = {
    "megahour_gpu": {"model": "h100", "count": 8},
    "megahour_fabric": {"type": "infiniband", "interface": "ib0"},
    "megahour_nvme_devices": ["/dev/nvme0n1"],
}


def snapshot(groups=None, **node_overrides):
    groups = groups if groups is not None else {"controller": ["head"], "compute": ["gpu1", "gpu2"]}
    node = {**GOOD_NODE, **node_overrides}
    hosts = {h: dict(node) for h in groups.get("compute", [])}
    return {"groups": groups, "hosts": hosts}


def variables(findings):
    return [f.variable for f in findings]


def test_a_good_inventory_has_no_findings():
    assert validate(snapshot()) == []


def test_missing_controller_group():
    findings = validate(snapshot(groups={"compute": ["gpu1"]}))
    assert variables(findings) == ["groups.controller"]
    assert "add a 'controller' group" in findings[0].fix


def test_zero_compute_nodes():
    findings = validate(snapshot(groups={"controller": ["head"], "compute": []}))
    assert variables(findings) == ["groups.compute"]
    assert "at least one GPU host" in findings[0].fix


def test_unknown_gpu_model_names_the_known_ones():
    findings = validate(snapshot(megahour_gpu={"model": "h900", "count": 8}))
    assert set(variables(findings)) == {"megahour_gpu.model"}
    assert "h100" in findings[0].fix and "profiles.py" in findings[0].fix
    assert {f.host for f in findings} == {"gpu1", "gpu2"}


def test_gpu_count_must_match_the_profile():
    findings = validate(snapshot(megahour_gpu={"model": "h100", "count": 6}))
    assert set(variables(findings)) == {"megahour_gpu.count"}
    assert "one of 1, 2, 4, 8" in findings[0].fix


def test_gpu_count_must_be_a_whole_number():
    for bad in ("8", True, 0, -2, None):
        assert "megahour_gpu.count" in variables(
            validate(snapshot(megahour_gpu={"model": "h100", "count": bad}))
        )


def test_fabric_interface_is_required_for_a_real_fabric():
    findings = validate(snapshot(megahour_fabric={"type": "roce"}))
    assert set(variables(findings)) == {"megahour_fabric.interface"}
    assert "NIC NCCL should use" in findings[0].fix


def test_fabric_none_needs_no_interface():
    assert validate(snapshot(megahour_fabric={"type": "none"})) == []


def test_missing_fabric_and_gpu_are_reported_together():
    snap = {"groups": {"controller": ["h"], "compute": ["g"]}, "hosts": {"g": {}}}
    assert set(variables(validate(snap))) == {"megahour_gpu", "megahour_fabric.type"}


def test_more_than_one_controller_is_refused():
    assert variables(validate(snapshot(groups={"controller": ["a", "b"], "compute": ["g"]}))) == [
        "groups.controller"
    ]


def test_fqdn_inventory_names_are_refused_as_slurm_node_names():
    findings = validate(snapshot(groups={"controller": ["head"], "compute": ["gpu1.example.org"]}))
    assert "inventory_hostname" in variables(findings)


def test_unsupported_os():
    snap = snapshot()
    snap["hosts"]["gpu1"]["megahour_os"] = "centos-7"
    assert variables(validate(snap)) == ["megahour_os"]


def test_rendered_finding_names_variable_host_and_fix():
    line = validate(snapshot(megahour_gpu={"model": "h100", "count": 3}))[0].render()
    assert line.startswith("megahour_gpu.count (host gpu1): ")
    assert "Fix: set megahour_gpu.count" in line


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=10,
)


@given(
    st.dictionaries(
        st.sampled_from(["controller", "compute", "login", "all"]),
        st.lists(st.sampled_from(["a", "b", "gpu-1", "x.y"]), max_size=3),
    ),
    st.dictionaries(
        st.sampled_from(["megahour_gpu", "megahour_fabric", "megahour_nvme_devices", "megahour_os"]),
        json_values,
    ),
)
def test_validate_never_crashes_and_every_finding_has_a_fix(groups, hostvars):
    hosts = {h: hostvars for hs in groups.values() for h in hs}
    findings = validate({"groups": groups, "hosts": hosts})
    for finding in findings:
        assert finding.variable and finding.message and finding.fix
    # Grouping for people loses no finding and repeats none.
    groups_ = group_findings(findings)
    expanded = {(g.variable, g.message, g.fix, h) for g in groups_ for h in (g.hosts or (None,))}
    assert expanded == {(f.variable, f.message, f.fix, f.host) for f in findings}
    assert len({(g.variable, g.message, g.fix) for g in groups_}) == len(groups_)


def test_findings_many_hosts_share_group_into_one_line_naming_them() -> None:
    hosts = [f"gpu{i:03d}" for i in range(1, 9)]
    findings = validate(
        snapshot(groups={"controller": ["head"], "compute": hosts}, megahour_fabric={"type": "roce"})
    )
    assert len(findings) == 8  # still one finding per host
    (group,) = group_findings(findings)
    assert group.hosts == tuple(hosts)
    assert render_grouped(findings) == [
        "megahour_fabric.interface (8 hosts: gpu[001-008]): a roce fabric needs its interface name. "
        "Fix: set megahour_fabric.interface to the NIC NCCL should use (for example ib0 or ens8f0)"
    ]


def test_a_group_of_one_renders_as_the_finding_does() -> None:
    findings = validate(
        snapshot(groups={"controller": ["head"], "compute": ["gpu1"]}, megahour_fabric={"type": "x"})
    )
    findings += validate(snapshot(groups={"compute": ["gpu1"]}))[:1]  # no controller group: no host
    assert render_grouped(findings) == [f.render() for f in findings]


def test_different_messages_stay_apart() -> None:
    snap = snapshot(groups={"controller": ["head"], "compute": ["a1", "a2"]})
    snap["hosts"]["a1"]["megahour_gpu"] = {"model": "h100", "count": 6}
    snap["hosts"]["a2"]["megahour_gpu"] = {"model": "h100", "count": 3}
    assert [g.hosts for g in group_findings(validate(snap))] == [("a1",), ("a2",)]


@pytest.mark.parametrize(
    "hosts,expected",
    [
        (["gpu001", "gpu002", "gpu003", "gpu005"], "gpu[001-003,005]"),
        (["gpu-1", "gpu-2", "gpu-10"], "gpu-[1-2],gpu-10"),
        (["head", "gpu7"], "head,gpu7"),
        (["b2", "a1", "b1"], "b[1-2],a1"),
        (["n01", "n01", "n02"], "n[01-02]"),
    ],
)
def test_host_ranges(hosts, expected) -> None:
    assert host_ranges(hosts) == expected
