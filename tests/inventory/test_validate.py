import pytest
from hypothesis import given
from hypothesis import strategies as st

from megahour.inventory.validate import group_findings, host_ranges, render_grouped, validate
from tests.inventory.snapshots import snapshot


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
    assert "h100" in findings[0].fix and "megahour_gpu_profiles" in findings[0].fix
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
    snap = snapshot(groups={"controller": ["h"], "compute": ["g"]})
    for name in ("megahour_gpu", "megahour_fabric"):
        del snap["hosts"]["g"][name]
    assert set(variables(validate(snap))) == {"megahour_gpu", "megahour_fabric.type"}


def test_a_primary_and_a_backup_controller_are_accepted():
    assert validate(snapshot(groups={"controller": ["a", "b"], "compute": ["g"]})) == []


def test_more_than_two_controllers_are_refused():
    findings = validate(snapshot(groups={"controller": ["a", "b", "c"], "compute": ["g"]}))
    assert variables(findings) == ["groups.controller"]
    assert "two for a backup slurmctld" in findings[0].fix


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


# --- what breaks a deploy, caught before any host is touched (one test per hole) ----------------------


def _all_hosts(snap, **values):
    for hv in snap["hosts"].values():
        hv.update(values)
    return snap


def test_the_complete_snapshot_is_valid():
    assert validate(snapshot()) == []


def test_no_cluster_group():
    snap = snapshot()
    del snap["groups"]["cluster"]
    (finding,) = validate(snap)
    assert finding.variable == "groups.cluster" and "children of a 'cluster' group" in finding.fix


def test_hosts_outside_the_cluster_group():
    snap = snapshot()
    snap["groups"]["cluster"] = ["head"]
    (finding,) = validate(snap)
    assert finding.variable == "groups.cluster" and "gpu[1-2]" in finding.message


@pytest.mark.parametrize("group,override", [("warehouse", "warehouse_host"), ("airflow", "airflow_host")])
def test_a_service_group_is_needed_unless_its_host_is_named(group, override):
    snap = snapshot()
    del snap["groups"][group]
    (finding,) = validate(snap)
    assert finding.variable == f"groups.{group}" and "has no" in finding.message and override in finding.fix
    snap["groups"][group] = []
    assert "an empty" in validate(snap)[0].message
    _all_hosts(snap, **{override: "head"})
    assert validate(snap) == []


@pytest.mark.parametrize(
    "dirs,variable",
    [
        ([], "megahour_cache_dirs"),
        (None, "megahour_cache_dirs"),
        ([{"path": "nvme0", "size": "3TB"}], "megahour_cache_dirs[0].path"),
        (
            [{"path": "/mnt/a", "size": "3TB"}, {"path": "/mnt/b", "size": "3 TB"}],
            "megahour_cache_dirs[1].size",
        ),
        ([{"path": "/mnt/a", "size": 3}], "megahour_cache_dirs[0].size"),
        ([{"path": "/mnt/a", "size": "1TB"}, {"path": "/mnt/a/", "size": "1TB"}], "megahour_cache_dirs"),
    ],
)
def test_cache_dirs_need_absolute_paths_and_sizes_that_parse(dirs, variable):
    findings = validate(snapshot(megahour_cache_dirs=dirs))
    assert set(variables(findings)) == {variable}
    assert {f.host for f in findings} == {"gpu1", "gpu2"}


def test_the_alluxio_override_of_the_cache_dirs_is_the_one_checked():
    findings = validate(snapshot(alluxio_worker_page_dirs=[{"path": "x", "size": "1GB"}]))
    assert set(variables(findings)) == {"alluxio_worker_page_dirs[0].path"}


@pytest.mark.parametrize(
    "url,words",
    [
        (None, "is not set"),
        ("", "is not set"),
        ("gs://episodes/x", "gs:// under-store is not built"),
        ("s3://CHANGE-ME-bucket/x", "is not a bucket name"),
        ("episodes/x", "neither an absolute directory nor a URL"),
    ],
)
def test_the_under_store_url(url, words):
    snap = snapshot()
    snap["hosts"]["head"]["alluxio_root_ufs"] = url
    (finding,) = validate(snap)
    assert (finding.variable, finding.host) == ("alluxio_root_ufs", "head") and words in finding.message


@pytest.mark.parametrize("url", ["s3://episodes", "s3a://my.bucket-1/a/b", "/srv/megahour", "{{ store }}"])
def test_under_stores_that_deploy(url):
    snap = snapshot()
    snap["hosts"]["head"]["alluxio_root_ufs"] = url
    assert validate(snap) == []


@pytest.mark.parametrize("root", ["srv/megahour", "/", "", 5])
def test_the_shared_root_must_be_an_absolute_directory(root):
    findings = validate(_all_hosts(snapshot(), megahour_shared_root=root))
    assert set(variables(findings)) == {"megahour_shared_root"} and len(findings) == 3


def test_a_non_root_login_needs_become():
    findings = validate(_all_hosts(snapshot(), ansible_user="ubuntu", ansible_become=False))
    assert set(variables(findings)) == {"ansible_become"} and "sudo" in findings[0].fix
    assert validate(_all_hosts(snapshot(), ansible_user="ubuntu", ansible_become="yes")) == []
    assert validate(_all_hosts(snapshot(), ansible_user="root", ansible_become=False)) == []
    # The local cluster: podman connections as the control node's user need no become.
    assert (
        validate(_all_hosts(snapshot(), ansible_user="x", ansible_become=False, ansible_connection="podman"))
        == []
    )


def test_the_os_must_be_declared():
    snap = snapshot()
    del snap["hosts"]["gpu1"]["megahour_os"]
    (finding,) = validate(snap)
    assert (finding.variable, finding.host) == ("megahour_os", "gpu1") and "debian-12" in finding.fix


def test_an_os_whose_python_cannot_run_the_runtime():
    findings = validate(_all_hosts(snapshot(), megahour_os="ubuntu-22.04"))
    assert set(variables(findings)) == {"megahour_os"}
    assert "ships Python 3.10" in findings[0].message and "3.11 or newer" in findings[0].message


@pytest.mark.parametrize(
    "interpreter,ok", [("python3", False), ("/usr/bin/python3", True), ("auto_silent", True)]
)
def test_the_python_interpreter_must_be_absolute(interpreter, ok):
    findings = validate(_all_hosts(snapshot(), ansible_python_interpreter=interpreter))
    assert (findings == []) is ok
    assert ok or set(variables(findings)) == {"ansible_python_interpreter"}


def test_a_custom_profile_from_group_vars_validates():
    profiles = {"mygpu": {"product_names": ["ACME MyGPU*"], "counts_per_node": [6], "min_driver_branch": 600}}
    assert (
        validate(snapshot(megahour_gpu={"model": "mygpu", "count": 6}, megahour_gpu_profiles=profiles)) == []
    )
    (finding, _) = validate(snapshot(megahour_gpu={"model": "mygpu", "count": 6}))
    assert finding.variable == "megahour_gpu.model" and "mygpu" in finding.message


def test_an_override_widens_a_builtin_shape():
    snap = snapshot(megahour_gpu={"model": "h100", "count": 6})
    assert "megahour_gpu.count" in variables(validate(snap))
    assert "counts_per_node" in validate(snap)[0].fix
    wider = snapshot(
        megahour_gpu={"model": "h100", "count": 6}, megahour_gpu_profiles={"h100": {"counts_per_node": [6]}}
    )
    assert validate(wider) == []


def test_a_bad_profile_is_a_finding_not_a_crash():
    findings = validate(snapshot(megahour_gpu_profiles={"h100": {"counts_per_node": "eight"}}))
    assert set(variables(findings)) == {"megahour_gpu_profiles.h100.counts_per_node"}


def test_the_validate_play_collects_exactly_the_variables_validation_reads():
    import re

    import yaml

    from megahour.inventory.validate import SNAPSHOT_EXTRA_VARS
    from tests.conftest import REPO

    play = yaml.safe_load((REPO / "playbooks" / "validate.yml").read_text())[0]
    pattern = play["vars"]["megahour_snapshot_vars"]
    names = re.fullmatch(r"\^\(megahour_\.\*\|(.*)\)\$", pattern).group(1).split("|")
    assert sorted(names) == sorted(SNAPSHOT_EXTRA_VARS)
