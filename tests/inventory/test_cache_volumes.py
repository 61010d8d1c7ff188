"""megahour.inventory.cache_volumes: the mounts the health gate requires, and the plan's errors reaching
validation before any host is touched. The plan itself is tested through the storage role's filters
(tests/roles/test_storage_filter.py), which call it."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from megahour.inventory import cache_volumes as cv
from megahour.inventory.validate import validate
from tests.conftest import REPO, filter_plugins
from tests.inventory.snapshots import snapshot

RULES = filter_plugins(REPO / "roles/slurm_node/filter_plugins/cache_mounts.py")["cache_mount_rules"]
STORAGE = filter_plugins(REPO / "roles/storage/filter_plugins/storage.py")


def dirs(*paths):
    return [{"path": p, "size": "3TB"} for p in paths]


def test_the_gate_requires_each_volume_and_each_image_mount_once():
    devices = [f"/dev/nvme{i}n1" for i in range(2)]
    rules = RULES(devices, dirs("/mnt/nvme0/alluxio", "/mnt/nvme1/alluxio"), ["/scratch/", "/mnt/nvme0"])
    assert rules == [
        {"path": "/mnt/nvme0", "require_mount": True},
        {"path": "/mnt/nvme1", "require_mount": True},
        {"path": "/scratch", "require_mount": True},
    ]


def test_the_local_cluster_requires_its_cache_volume_without_devices():
    # inventories/local: no NVMe, a podman volume mounted at the cache directory itself.
    assert RULES([], dirs("/var/lib/megahour/nvme0"), ["/var/lib/megahour/nvme0"]) == [
        {"path": "/var/lib/megahour/nvme0", "require_mount": True}
    ]
    assert RULES([], dirs("/var/lib/megahour/nvme0")) == []


def test_the_gate_and_the_storage_role_agree_on_the_mount_points():
    devices = ["/dev/nvme1n1", "/dev/nvme2n1"]
    cache = dirs("/data/nvme/alluxio")
    planned = STORAGE["storage_volumes"](devices, cache, "raid0", None, "/data/nvme")
    assert STORAGE["storage_required_mounts"](planned, []) == ["/data/nvme"]
    assert [r["path"] for r in RULES(devices, cache, [], "raid0", None, "/data/nvme")] == ["/data/nvme"]


def test_a_relative_image_mount_names_the_variable():
    with pytest.raises(ValueError, match="megahour_cache_mounts: 'scratch' is not an absolute path"):
        cv.required_mounts([], ["scratch"])


@given(st.lists(st.sampled_from(["/a", "/a/", "/b", "/c/d", "/c/d/"]), max_size=8))
def test_required_mounts_have_no_duplicates_or_trailing_slashes(paths):
    out = cv.required_mounts([], paths)
    assert len(out) == len(set(out))
    assert all(p == "/" or not p.endswith("/") for p in out)
    assert set(out) == {p.rstrip("/") for p in paths}


def test_validation_refuses_a_plan_the_storage_role_would_refuse():
    # Two devices, cache directories outside the array's mount: the role would fail mid-deploy.
    findings = validate(
        snapshot(megahour_nvme_devices=["/dev/nvme0n1", "/dev/nvme1n1"], megahour_cache_dirs=dirs("/data/x"))
    )
    assert [(f.variable, f.host) for f in findings] == [
        ("megahour_nvme_devices", "gpu1"),
        ("megahour_nvme_devices", "gpu2"),
    ]
    assert "mounts one array at /mnt/nvme" in findings[0].message
    assert findings[0].fix == "put them under /mnt/nvme or set megahour_cache_raid_mount"


def test_validation_reads_the_raid_mount_and_layout():
    good = snapshot(
        megahour_nvme_devices=["/dev/nvme0n1", "/dev/nvme1n1"],
        megahour_cache_dirs=dirs("/data/x"),
        megahour_cache_raid_mount="/data",
    )
    assert validate(good) == []
    bad = snapshot(megahour_cache_layout="raid5")
    assert [f.variable for f in validate(bad)] == ["megahour_nvme_devices"] * 2


@pytest.mark.parametrize("inventory", ["example-baremetal-h100", "example-cloud-h200"])
def test_the_example_inventories_plan_one_volume_per_device(inventory):
    import yaml

    compute = yaml.safe_load((REPO / "inventories" / inventory / "group_vars/compute.yml").read_text())
    plan = cv.plan(compute["megahour_nvme_devices"], compute["megahour_cache_dirs"])
    assert [v.device for v in plan] == compute["megahour_nvme_devices"]
    assert all(not v.members for v in plan)
