from hypothesis import given
from hypothesis import strategies as st

from megahour.inventory.validate import validate

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
    for finding in validate({"groups": groups, "hosts": hosts}):
        assert finding.variable and finding.message and finding.fix
