"""megahour.nvidia.host_checks: each requirement judged on real reports, each failure naming its fix."""

from dataclasses import replace
from pathlib import Path

import pytest

from megahour.inventory.profiles import BUILTIN
from megahour.nvidia import host_checks as hc
from megahour.nvidia.smi_report import parse
from tests.conftest import REPO

FIXTURES = Path(__file__).parent / "fixtures" / "smi-q"
H100_X8 = parse((REPO / "roles/nvidia/files/fake-gpu/h100-healthy/smi-q-8xH100.txt").read_text())
A10G = parse((FIXTURES / "a10g-x1-persistence-off.txt").read_text())
HEALTHY_UNITS = frozenset({hc.PERSISTENCED, hc.FABRIC_MANAGER})


def by_name(findings):
    return {f.name: f for f in findings}


def test_an_hgx_h100_node_with_its_fabric_manager_passes():
    req = hc.requirements(BUILTIN["h100"], 8, "ethernet")
    assert req.fabric_manager and not req.peermem and req.persistence
    findings = hc.check(req, hc.HostState(H100_X8, active_units=HEALTHY_UNITS))
    assert [f.name for f in findings] == ["driver", "gpus", "persistence", "fabric_manager"]
    assert all(f.ok for f in findings), hc.summary(findings)
    assert hc.summary(findings) == ""


def test_a_driver_below_the_profiles_branch_fails_naming_the_branch_to_install():
    profile = replace(BUILTIN["h100"], min_driver_branch=570)
    findings = by_name(
        hc.check(hc.requirements(profile, 8), hc.HostState(H100_X8, active_units=HEALTHY_UNITS))
    )
    driver = findings["driver"]
    assert not driver.ok
    assert "565.57.01 is branch 565, older than 570" in driver.message
    assert "install driver branch 570 or newer" in driver.fix
    # The setting it names is the nvidia role's own, with a value its apt pin accepts.
    assert "nvidia_driver_version: '570.*'" in driver.fix
    assert "nvidia_driver_version:" in (REPO / "roles" / "nvidia" / "meta" / "argument_specs.yml").read_text()


def test_no_report_fails_the_driver_check_only():
    state = hc.HostState(None, smi_error="nvidia-smi -q: not installed")
    (finding,) = hc.check(hc.requirements(BUILTIN["h100"], 8), state)
    assert finding.name == "driver" and not finding.ok
    assert "not installed" in finding.message
    assert f"branch {BUILTIN['h100'].min_driver_branch} or newer" in finding.fix


def test_persistence_off_names_the_gpus_and_persistenced():
    # No built-in profile for the A10G (megahour_gpu_profiles would add one): the requirements by hand.
    req = hc.HostRequirements("a10g", ("NVIDIA A10G",), 1, 470)
    persistence = by_name(hc.check(req, hc.HostState(A10G)))["persistence"]
    assert not persistence.ok
    assert "00000000:00:1E.0" in persistence.message and hc.PERSISTENCED in persistence.fix


def test_a_stopped_fabric_manager_fails_with_cudas_error_802():
    state = hc.HostState(H100_X8, active_units=frozenset({hc.PERSISTENCED}))
    finding = by_name(hc.check(hc.requirements(BUILTIN["h100"], 8), state))["fabric_manager"]
    assert not finding.ok and "error 802" in finding.message
    assert "systemctl enable --now nvidia-fabricmanager" in finding.fix


def test_a_fabric_registration_in_progress_fails_until_it_completes():
    # The state a p5.48xlarge shows before its fabric manager finishes (SOURCES.md, zenndocs).
    gpus = tuple(replace(g, fabric_state="In Progress", fabric_status="N/A") for g in H100_X8.gpus)
    state = hc.HostState(replace(H100_X8, gpus=gpus), active_units=HEALTHY_UNITS)
    finding = by_name(hc.check(hc.requirements(BUILTIN["h100"], 8), state))["fabric_manager"]
    assert not finding.ok and "In Progress/N/A" in finding.message and "journalctl" in finding.fix


@pytest.mark.parametrize(("count", "expected"), [(8, True), (4, False), (2, False)])
def test_the_fabric_manager_is_asked_of_full_nvswitch_boards_only(count, expected):
    assert hc.requirements(BUILTIN["h100"], count).fabric_manager is expected
    assert hc.requirements(BUILTIN["l40s"], 8).fabric_manager is False


@pytest.mark.parametrize(("fabric", "expected"), [("infiniband", True), ("roce", True), ("ethernet", False)])
def test_peermem_is_asked_on_rdma_fabrics(fabric, expected):
    req = hc.requirements(BUILTIN["h100"], 8, fabric)
    assert req.peermem is expected
    if expected:
        missing = by_name(hc.check(req, hc.HostState(H100_X8, active_units=HEALTHY_UNITS)))["peermem"]
        assert not missing.ok and "modprobe nvidia_peermem" in missing.fix
        loaded = hc.HostState(H100_X8, active_units=HEALTHY_UNITS, loaded_modules=frozenset({hc.PEERMEM}))
        assert by_name(hc.check(req, loaded))["peermem"].ok


def test_switches_override_auto_and_refuse_other_values():
    assert hc.requirements(BUILTIN["h100"], 8, "roce", peermem=False, fabric_manager=False).peermem is False
    # Strings as an inventory may hand them over.
    assert hc.requirements(BUILTIN["h100"], 8, "roce", peermem="False", fabric_manager="yes").peermem is False
    assert hc.requirements(BUILTIN["h100"], 2, fabric_manager="true").fabric_manager is True
    with pytest.raises(ValueError, match="nvidia_fabric_manager is 'sometimes'"):
        hc.requirements(BUILTIN["h100"], 8, fabric_manager="sometimes")


def test_dcgm_when_asked():
    req = hc.requirements(BUILTIN["h100"], 8, dcgm=True)
    assert not by_name(hc.check(req, hc.HostState(H100_X8, active_units=HEALTHY_UNITS)))["dcgm"].ok
    units = HEALTHY_UNITS | {hc.DCGM}
    assert by_name(hc.check(req, hc.HostState(H100_X8, active_units=units)))["dcgm"].ok


def test_a_missing_gpu_and_a_stranger_are_named():
    req = hc.requirements(BUILTIN["h100"], 8)
    fewer = replace(H100_X8, gpus=H100_X8.gpus[:7])
    gpus = by_name(hc.check(req, hc.HostState(fewer, active_units=HEALTHY_UNITS)))["gpus"]
    assert not gpus.ok and "sees 7 GPUs, the inventory declares 8" in gpus.message
    a100 = hc.requirements(BUILTIN["a100"], 8)
    stranger = by_name(hc.check(a100, hc.HostState(H100_X8, active_units=HEALTHY_UNITS)))["gpus"]
    assert not stranger.ok and "megahour_gpu_profiles.a100.product_names" in stranger.fix


def test_requirements_from_the_inventory_merge_the_profiles():
    req = hc.requirements_from_inventory(
        {"model": "h100", "count": 2}, {"h100": {"min_driver_branch": 999}}, {"type": "roce"}
    )
    assert (req.min_driver_branch, req.gpu_count, req.peermem, req.fabric_manager) == (999, 2, True, False)
    assert hc.requirements_from_inventory({"count": 0}, None, None) is None
    with pytest.raises(ValueError, match=r"unknown megahour_gpu\.model 'k80'"):
        hc.requirements_from_inventory({"model": "k80", "count": 1}, None, None)
