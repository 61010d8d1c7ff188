"""roles/storage/filter_plugins/storage.py: which volumes to build, the mdadm command, and when to format.

RAID0 assembly cannot run here (no md driver in this kernel): these tests and the role's guards are what
covers it; docs/roles.md#storage says so.
"""

import pytest
from ansible.errors import AnsibleFilterError
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import REPO, filter_plugins

FILTERS = filter_plugins(REPO / "roles/storage/filter_plugins/storage.py")
volumes = FILTERS["storage_volumes"]
mdadm = FILTERS["mdadm_create_argv"]
decide = FILTERS["storage_format_decision"]


def dirs(*paths):
    return [{"path": p, "size": "3TB"} for p in paths]


def test_the_example_inventories_one_filesystem_a_device():
    # inventories/example-baremetal-h100: four devices, /mnt/nvme0..3/alluxio.
    devices = [f"/dev/nvme{i}n1" for i in range(4)]
    plan = volumes(devices, dirs(*(f"/mnt/nvme{i}/alluxio" for i in range(4))))
    assert plan == [{"device": f"/dev/nvme{i}n1", "members": [], "mount": f"/mnt/nvme{i}"} for i in range(4)]


def test_two_devices_and_one_cache_directory_make_one_raid0_array():
    plan = volumes(["/dev/nvme1n1", "/dev/nvme2n1"], dirs("/mnt/nvme/alluxio"))
    assert plan == [
        {
            "device": "/dev/md/megahour-cache",
            "members": ["/dev/nvme1n1", "/dev/nvme2n1"],
            "mount": "/mnt/nvme",
        }
    ]
    assert mdadm(plan[0]) == [
        "mdadm", "--create", "/dev/md/megahour-cache", "--run", "--level=0", "--chunk=512",
        "--raid-devices=2", "/dev/nvme1n1", "/dev/nvme2n1",
    ]  # fmt: skip


def test_one_device_is_formatted_and_mounted_without_an_array():
    assert volumes(["/dev/nvme0n1"], dirs("/mnt/nvme0/alluxio")) == [
        {"device": "/dev/nvme0n1", "members": [], "mount": "/mnt/nvme0"}
    ]
    assert volumes(["/dev/nvme0n1"], dirs("/mnt/nvme/a"), "raid0") == [
        {"device": "/dev/nvme0n1", "members": [], "mount": "/mnt/nvme"}
    ]


def test_no_devices_no_volumes():
    assert volumes([], dirs("/var/lib/megahour/nvme0")) == []
    assert volumes(None, None) == []


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((["/dev/a", "/dev/b"], dirs("/mnt/x/c"), "per_device"), "one cache directory parent a device"),
        ((["/dev/a", "/dev/b"], dirs("/data/c"), "raid0"), "put them under /mnt/nvme"),
        ((["/dev/a"], [], "auto"), "megahour_cache_dirs is empty"),
        ((["/dev/a", "/dev/a"], dirs("/mnt/nvme/c"), "auto"), "lists a device twice"),
        ((["/dev/a"], dirs("/mnt/nvme/c"), "raid5"), "megahour_cache_layout is 'raid5'"),
        ((["/dev/a"], [{"path": "relative"}], "auto"), "has no absolute path"),
    ],
)
def test_plans_that_cannot_work_name_the_setting(args, match):
    with pytest.raises(AnsibleFilterError, match=match):
        volumes(*args)


def test_an_array_needs_two_members():
    with pytest.raises(AnsibleFilterError, match="needs two devices"):
        mdadm({"device": "/dev/md/x", "members": ["/dev/a"]})


@pytest.mark.parametrize(
    ("fstype", "force", "expected"),
    [("xfs", False, "keep"), ("", False, "format"), ("ext4", False, "refuse"), ("ext4", True, "format"),
     ("linux_raid_member", False, "refuse"), ("xfs\n", True, "keep")],
)  # fmt: skip
def test_only_empty_devices_are_formatted_unless_forced(fstype, force, expected):
    assert decide(fstype, force) == expected


@given(st.integers(min_value=1, max_value=16), st.booleans())
def test_every_device_lands_in_exactly_one_volume(count, per_device):
    devices = [f"/dev/nvme{i}n1" for i in range(count)]
    cache = (
        dirs(*(f"/mnt/nvme{i}/alluxio" for i in range(count))) if per_device else dirs("/mnt/nvme/alluxio")
    )
    plan = volumes(devices, cache)
    used = [d for v in plan for d in (v["members"] or [v["device"]])]
    assert sorted(used) == sorted(devices)
    # Each cache directory sits on exactly one volume.
    for entry in cache:
        assert sum(entry["path"].startswith(v["mount"] + "/") for v in plan) == 1, (entry, plan)
