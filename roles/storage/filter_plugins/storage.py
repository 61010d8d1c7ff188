"""The node-local cache volumes from the inventory's NVMe devices and cache directories.

``storage_volumes`` decides what to build; the role's tasks only carry it out. A volume is a device (or a
RAID0 array of several) formatted XFS and mounted at a directory that holds cache directories:

- ``per_device``: one filesystem a device, mounted at the parent of the cache directories on it
  (``/dev/nvme0n1`` at ``/mnt/nvme0`` for ``/mnt/nvme0/alluxio``), devices and mount points in order;
- ``raid0``: one array of every device (``storage_raid_device``), mounted at ``storage_raid_mount``, which
  must hold every cache directory;
- ``auto``: ``per_device`` when the cache directories have one parent a device, else ``raid0``.
"""

from __future__ import annotations

import posixpath

from ansible.errors import AnsibleFilterError

LAYOUTS = ("auto", "per_device", "raid0")
# mdadm's chunk for RAID0 over NVMe: large sequential page reads, and a multiple of XFS's 4 KiB blocks.
RAID_CHUNK_KIB = 512


def _parents(cache_dirs) -> list[str]:
    out: list[str] = []
    for entry in cache_dirs or []:
        path = entry.get("path") if isinstance(entry, dict) else entry
        if not isinstance(path, str) or not path.startswith("/"):
            raise AnsibleFilterError(f"megahour_cache_dirs: {entry!r} has no absolute path")
        parent = posixpath.dirname(path.rstrip("/")) or "/"
        if parent not in out:
            out.append(parent)
    return out


def _under(path: str, mount: str) -> bool:
    return path == mount or path.startswith(mount.rstrip("/") + "/")


def storage_volumes(
    devices, cache_dirs, layout="auto", raid_device="/dev/md/megahour-cache", raid_mount="/mnt/nvme"
):
    """What to build: ``[{device, members, mount}]`` (members: the array's devices; empty for one device)."""
    devices = list(devices or [])
    if layout not in LAYOUTS:
        raise AnsibleFilterError(f"storage_layout is {layout!r}; set it to one of {', '.join(LAYOUTS)}")
    if not devices:
        return []
    if len(set(devices)) != len(devices):
        raise AnsibleFilterError(f"megahour_nvme_devices lists a device twice: {devices}")
    parents = _parents(cache_dirs)
    if not parents:
        raise AnsibleFilterError(
            "megahour_nvme_devices is set but megahour_cache_dirs is empty; "
            "list the cache directories on those devices"
        )
    if layout == "auto":
        layout = "per_device" if len(parents) == len(devices) else "raid0"
    if layout == "per_device":
        if len(parents) != len(devices):
            raise AnsibleFilterError(
                "storage_layout per_device needs one cache directory parent a device: "
                f"{len(devices)} devices, parents {parents}; list one cache directory a device "
                "(/mnt/nvme0/alluxio, ...) or use raid0"
            )
        return [{"device": d, "members": [], "mount": m} for d, m in zip(devices, parents, strict=True)]
    outside = [p for p in parents if not _under(p, raid_mount)]
    if outside:
        raise AnsibleFilterError(
            f"storage_layout raid0 mounts one array at {raid_mount}, but cache directories are under "
            f"{outside}; put them under {raid_mount} or set storage_raid_mount"
        )
    if len(devices) == 1:
        return [{"device": devices[0], "members": [], "mount": raid_mount}]
    return [{"device": raid_device, "members": devices, "mount": raid_mount}]


def mdadm_create_argv(volume):
    """The mdadm command that assembles ``volume``'s members as RAID0 (run only when it does not exist)."""
    members = list(volume.get("members") or [])
    if len(members) < 2:
        raise AnsibleFilterError(f"{volume.get('device')}: a RAID0 array needs two devices or more")
    return [
        "mdadm",
        "--create",
        volume["device"],
        "--run",
        "--level=0",
        f"--chunk={RAID_CHUNK_KIB}",
        f"--raid-devices={len(members)}",
        *members,
    ]


def storage_format_decision(fstype, force=False):
    """What to do with a device whose `blkid` TYPE is ``fstype``: ``keep`` XFS, ``format`` an empty
    device, ``refuse`` anything else unless ``force`` (never reformat a filesystem by default)."""
    fstype = (fstype or "").strip()
    if fstype == "xfs":
        return "keep"
    if fstype == "" or force:
        return "format"
    return "refuse"


class FilterModule:
    def filters(self):
        return {
            "storage_volumes": storage_volumes,
            "mdadm_create_argv": mdadm_create_argv,
            "storage_format_decision": storage_format_decision,
        }
