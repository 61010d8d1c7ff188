"""The storage role's cache-volume tasks run for real, on this machine, against loop devices: an empty
device is formatted XFS and mounted by UUID with noatime,nofail, a second run changes nothing, and a device
that holds another filesystem is refused with the fix.

The molecule containers may not mount, so this is where formatting and mounting run (as root, on a loop
device backed by a sparse file; the mount is recorded in an fstab of the test's own, never /etc/fstab).
RAID0 assembly is not run: this kernel has no md driver (docs/roles.md#storage).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO, tool

PLAYBOOK = REPO / "tests" / "roles" / "data" / "storage_cache_volume.yml"
# mkfs.xfs refuses filesystems under 300 MB; the file is sparse, so it costs almost no disk.
DEVICE_BYTES = 320 * 1024 * 1024


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root (losetup, mkfs.xfs, mount)"
    if not Path("/dev/loop-control").exists():
        return "this kernel has no loop devices"
    for command in ("losetup", "mkfs.xfs", "mkfs.ext4", "findmnt"):
        if shutil.which(command) is None:
            return f"`{command}` is not installed (xfsprogs: `make prereqs` installs it)"
    return None


pytestmark = [pytest.mark.integration, pytest.mark.skipif(_why_not() is not None, reason=str(_why_not()))]


@pytest.fixture
def loop_device(tmp_path):
    """Attach loop devices backed by sparse files; detach them (and unmount) afterwards."""
    attached: list[str] = []
    mounts: list[Path] = []

    def _attach(name: str) -> str:
        backing = tmp_path / f"{name}.img"
        with backing.open("wb") as f:
            f.truncate(DEVICE_BYTES)
        device = subprocess.run(
            ["losetup", "--find", "--show", str(backing)], capture_output=True, text=True, check=True
        ).stdout.strip()
        attached.append(device)
        return device

    _attach.mounts = mounts
    yield _attach
    for mount in mounts:
        subprocess.run(["umount", str(mount)], capture_output=True, check=False)
    for device in attached:
        subprocess.run(["losetup", "--detach", device], capture_output=True, check=False)


def play(run, tmp_path, devices, cache_dirs, **extra):
    variables = {
        "storage_devices": devices,
        "storage_cache_dirs": [{"path": str(p), "size": "1GB"} for p in cache_dirs],
        "storage_fstab": str(tmp_path / "fstab"),
        **extra,
    }
    args = [tool("ansible-playbook"), "-i", "localhost,", str(PLAYBOOK), "--skip-tags", "install"]
    return run([*args, "-e", json.dumps(variables)], env={"ANSIBLE_PYTHON_INTERPRETER": tool("python")})


def findmnt(path: Path) -> dict:
    out = subprocess.run(
        ["findmnt", "--json", "--mountpoint", str(path), "--output", "SOURCE,FSTYPE,OPTIONS"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, f"{path} is not a mount"
    return json.loads(out.stdout)["filesystems"][0]


def test_an_empty_device_is_formatted_mounted_and_left_alone_the_second_time(run, tmp_path, loop_device):
    device = loop_device("nvme0")
    mount = tmp_path / "mnt" / "nvme0"
    loop_device.mounts.append(mount)

    first = play(run, tmp_path, [device], [mount / "alluxio"])
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr

    fs = findmnt(mount)
    assert (fs["source"], fs["fstype"]) == (device, "xfs")
    assert "noatime" in fs["options"].split(",")
    uuid = subprocess.run(
        ["blkid", "-o", "value", "-s", "UUID", device], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert f"UUID={uuid} {mount} xfs noatime,nofail 0 0" in (tmp_path / "fstab").read_text()

    second = play(run, tmp_path, [device], [mount / "alluxio"])
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr
    assert "changed=0" in second.stdout, second.stdout[-3000:]
    assert "failed=0" in second.stdout


def test_a_device_that_holds_another_filesystem_is_refused_with_the_fix(run, tmp_path, loop_device):
    device = loop_device("used")
    subprocess.run(["mkfs.ext4", "-q", "-F", device], capture_output=True, check=True)
    mount = tmp_path / "mnt" / "used"
    loop_device.mounts.append(mount)

    refused = play(run, tmp_path, [device], [mount / "alluxio"])
    assert refused.returncode != 0
    assert f"{device} on localhost holds a ext4 filesystem" in refused.stdout
    assert f"wipefs -a {device}" in refused.stdout
    # Nothing was formatted or mounted.
    assert (
        subprocess.run(
            ["blkid", "-o", "value", "-s", "TYPE", device], capture_output=True, text=True
        ).stdout.strip()
        == "ext4"
    )
    assert not (tmp_path / "fstab").exists() or str(mount) not in (tmp_path / "fstab").read_text()
