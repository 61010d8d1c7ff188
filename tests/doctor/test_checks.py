"""The doctor's checks: a real probe run (fixtures/) against what the inventory expects, one blocker at a
time, each naming the host and the fix."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from megahour.doctor import checks, facts
from megahour.doctor.checks import CHECKS, Status
from megahour.inventory.profiles import BUILTIN
from tests.inventory.snapshots import snapshot

FIXTURES = Path(__file__).parent / "fixtures"
HOST = (FIXTURES / "probe-dev-host-debian12.txt").read_text()
B200 = (FIXTURES / "nvidia-smi-doctor-b200x4.csv").read_text()
WINDOW = (1796186462.0, 1796186464.0)


def node_facts(**changes) -> facts.HostFacts:
    """The real host capture made a ready B200 node: its GPUs, the shared root and a cache directory
    mounted (mount entries the tests add, since the development machine has neither)."""
    f = facts.parse(HOST)
    f.gpus, _ = facts.parse_gpus(B200)
    f.mounts = [
        *f.mounts,
        facts.Mount("/srv/megahour", "nfs:/export", "nfs4"),
        facts.Mount("/mnt/nvme0", "/dev/nvme0n1", "xfs"),
    ]
    f.block_devices = [
        *f.block_devices,
        facts.BlockDevice("nvme0n1", "/dev/nvme0n1", "disk", 3840755982336, "xfs", "/mnt/nvme0", None),
    ]
    f.timesync = {"NTP": "yes", "NTPSynchronized": "yes"}
    f.clock = 1796186463.0
    for key, value in changes.items():
        setattr(f, key, value)
    return f


def b200_expect(**changes) -> checks.HostExpect:
    snap = snapshot(
        megahour_gpu={"model": "b200", "count": 4},
        megahour_fabric={"type": "ethernet", "interface": "eth0"},
        megahour_nvme_devices=["/dev/nvme0n1"],
        megahour_cache_dirs=[{"path": "/mnt/nvme0/alluxio", "size": "3TB"}],
    )
    return dataclasses.replace(checks.expect_from_snapshot(snap, "gpu1"), **changes)


def run(expect=None, f=None, **options):
    return checks.check_host(expect or b200_expect(), f or node_facts(), WINDOW, **options)


def by_name(result):
    return {c.name: c for c in result}


def test_a_ready_node_passes_every_check():
    result = run()
    assert [c.name for c in result] == list(CHECKS)
    assert [c.render() for c in result if c.status not in (Status.PASS, Status.SKIP)] == []
    assert by_name(result)["driver"].message == "580.95.05 (needs 570+)"


def test_the_inventory_is_read_into_expectations():
    e = b200_expect()
    assert (e.compute, e.gpu_count, e.profile, e.fabric_interface) == (True, 4, BUILTIN["b200"], "eth0")
    assert (e.nvme_devices, e.cache_dirs, e.shared_root, e.time_sync) == (
        ("/dev/nvme0n1",),
        ("/mnt/nvme0/alluxio",),
        "/srv/megahour",
        True,
    )
    head = checks.expect_from_snapshot(snapshot(), "head")
    assert not head.compute and head.cache_dirs == ()


def blocker(result, name):
    found = by_name(result)[name]
    assert found.status is Status.FAIL, found
    assert found.fix and found.host == "gpu1"
    assert checks.first_blocker(result) is not None
    return found


def test_a_hidden_gpu_blocks():
    f = node_facts()
    f.gpus = f.gpus[:3]
    found = blocker(run(f=f), "gpu_count")
    assert "3 GPUs visible, the inventory declares 4" in found.message


def test_no_driver_names_the_branch_to_install():
    f = node_facts(gpus=None)
    found = blocker(run(f=f), "gpu_count")
    assert "not installed" in found.message and "branch 570 or newer" in found.fix


def test_an_old_driver_blocks():
    f = node_facts()
    f.gpus = [dataclasses.replace(g, driver_version="560.35.03") for g in f.gpus]
    assert "older than branch 570" in blocker(run(f=f), "driver").message


def test_a_different_gpu_model_blocks():
    f = node_facts()
    f.gpus = [dataclasses.replace(g, name="NVIDIA H100 80GB HBM3") for g in f.gpus]
    assert "megahour_gpu_profiles.b200.product_names" in blocker(run(f=f), "gpu_model").fix


def test_the_fabric_interface_must_exist_and_be_up():
    assert "does not exist" in blocker(run(b200_expect(fabric_interface="bond0")), "fabric").message
    assert "is DOWN" in blocker(run(b200_expect(fabric_interface="ifb0")), "fabric").message


def test_an_nvme_in_use_elsewhere_or_missing_blocks():
    assert "does not exist" in blocker(run(b200_expect(nvme_devices=("/dev/nvme9n1",))), "nvme").message
    found = blocker(run(b200_expect(nvme_devices=("/dev/vda",))), "nvme")
    assert "in use, mounted at /" in found.message


def test_an_unused_nvme_is_fine_for_the_nvme_check():
    f = node_facts()
    f.block_devices = [
        *f.block_devices,
        facts.BlockDevice("nvme1n1", "/dev/nvme1n1", "disk", 1, None, None, None),
    ]
    e = b200_expect(nvme_devices=("/dev/nvme0n1", "/dev/nvme1n1"))
    assert "/dev/nvme1n1 unused" in by_name(run(e, f))["nvme"].message


def test_a_cache_dir_not_on_the_nvme_blocks():
    f = node_facts()
    f.mounts = [m for m in f.mounts if m.target != "/mnt/nvme0"]
    found = blocker(run(f=f), "cache_dirs")
    assert "is on /dev/vda at /" in found.message and "mount it at /mnt/nvme0" in found.fix


def test_a_stand_in_directory_must_exist_without_nvme_devices():
    e = b200_expect(nvme_devices=(), cache_dirs=("/var/lib/megahour/nvme0",))
    found = blocker(run(e), "cache_dirs")
    assert "does not exist and /var/lib/megahour is not a mount point" in found.message
    f = node_facts()
    f.paths = {**f.paths, "/var/lib/megahour/nvme0": "dir"}
    assert by_name(run(e, f))["cache_dirs"].status is Status.PASS


def test_the_shared_filesystem_must_be_mounted():
    f = node_facts()
    f.mounts = [m for m in f.mounts if m.target != "/srv/megahour"]
    found = blocker(run(f=f), "shared_fs")
    assert "not mounted at /srv/megahour (the directory does not exist)" in found.message


def test_time_sync_and_clock():
    assert "not NTP-synchronized" in blocker(run(f=node_facts(timesync=None)), "time_sync").message
    assert (
        by_name(run(b200_expect(time_sync=False), node_facts(timesync=None)))["time_sync"].status
        is Status.SKIP
    )
    assert "30.0 s off" in blocker(run(f=node_facts(clock=WINDOW[1] + 30)), "clock").message
    assert by_name(run(f=node_facts(clock=WINDOW[0] - 1)))["clock"].status is Status.PASS


def test_os_python_arch_and_disk():
    assert "says megahour_os ubuntu-24.04" in blocker(run(b200_expect(os="ubuntu-24.04")), "os").message
    assert "needs 3.11" in blocker(run(f=node_facts(python=(3, 10, 12))), "python").message
    assert "no usable python3" in blocker(run(f=node_facts(python=None)), "python").message
    gb200 = b200_expect(profile=BUILTIN["gb200"])
    assert "the gb200 profile says aarch64" in blocker(run(gb200), "arch").message
    assert "GiB free on /" in blocker(run(min_free_gib=1000), "disk").message


def test_an_unreachable_host_is_one_blocker_with_the_fix():
    check = checks.unreachable("gpu7", "Failed to connect to the host via ssh: timed out\nmore")
    assert check.blocks and "ssh: timed out)" in check.message and "ansible.builtin.ping" in check.fix
    assert check.render().startswith("gpu7: reachable: ")


def test_the_controller_skips_the_node_checks():
    head = checks.expect_from_snapshot(snapshot(), "head")
    result = by_name(checks.check_host(head, node_facts(), WINDOW))
    for name in ("gpu_count", "gpu_model", "driver", "fabric", "nvme", "cache_dirs"):
        assert result[name].status is Status.SKIP


@pytest.mark.parametrize("status", list(Status))
def test_every_check_serializes(status):
    check = checks.Check("h", "os", status, "m", "f")
    assert check.to_dict() == {"host": "h", "name": "os", "status": status.value, "message": "m", "fix": "f"}


def test_a_local_cluster_node_passes_as_molecule_faults_expects():
    """The probe's real answer from a local-cluster container, checked as the local inventory declares it."""
    f = facts.parse((FIXTURES / "probe-local-cluster-node.txt").read_text())
    assert f.unreadable == {} and f.is_mount_point("/srv/megahour")
    snap = snapshot(
        megahour_gpu={"model": "h100", "count": 2},
        megahour_fabric={"type": "none"},
        megahour_nvme_devices=[],
        megahour_cache_dirs=[{"path": "/var/lib/megahour/nvme0", "size": "1GB"}],
    )
    for hv in snap["hosts"].values():
        hv["common_time_sync_enabled"] = False
    expect = checks.expect_from_snapshot(snap, "gpu1")
    result = checks.check_host(expect, f, (f.clock - 1, f.clock + 1), min_free_gib=1)
    assert [c.render() for c in result if c.status in (Status.FAIL, Status.WARN)] == []
    assert by_name(result)["time_sync"].status is Status.SKIP  # NTPSynchronized=no, as in any container
