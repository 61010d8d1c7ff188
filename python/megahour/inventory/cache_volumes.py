"""The node-local cache volumes from the inventory's NVMe devices and cache directories.

One derivation, run on the control node, that the ``storage`` role (what to format and mount) and the
``slurm_node`` role (which mount points the health gate requires) both call, so the two never disagree.
A volume is a device (or a RAID0 array of several) formatted XFS and mounted at a directory that holds
cache directories:

- ``per_device``: one filesystem a device, mounted at the parent of the cache directories on it
  (``/dev/nvme0n1`` at ``/mnt/nvme0`` for ``/mnt/nvme0/alluxio``), devices and mount points in order;
- ``raid0``: one array of every device (``raid_device``), mounted at ``raid_mount``, which must hold
  every cache directory;
- ``auto``: ``per_device`` when the cache directories have one parent a device, else ``raid0``.

Mount points the vendor's image mounts itself (``megahour_cache_mounts``) are required as mounts too.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

LAYOUTS = ("auto", "per_device", "raid0")
DEFAULT_RAID_DEVICE = "/dev/md/megahour-cache"
DEFAULT_RAID_MOUNT = "/mnt/nvme"
# mdadm's chunk for RAID0 over NVMe: large sequential page reads, and a multiple of XFS's 4 KiB blocks.
RAID_CHUNK_KIB = 512


@dataclass(frozen=True)
class Volume:
    device: str  # the block device formatted XFS: a disk, or the array
    mount: str
    members: tuple[str, ...] = field(default_factory=tuple)  # the array's disks; empty for one disk

    def as_dict(self) -> dict:
        return {"device": self.device, "members": list(self.members), "mount": self.mount}


def _parents(cache_dirs: Iterable) -> list[str]:
    out: list[str] = []
    for entry in cache_dirs or []:
        path = entry.get("path") if isinstance(entry, dict) else entry
        if not isinstance(path, str) or not path.startswith("/"):
            raise ValueError(f"megahour_cache_dirs: {entry!r} has no absolute path")
        parent = posixpath.dirname(path.rstrip("/")) or "/"
        if parent not in out:
            out.append(parent)
    return out


def _under(path: str, mount: str) -> bool:
    return path == mount or path.startswith(mount.rstrip("/") + "/")


def plan(
    devices: Sequence[str] | None,
    cache_dirs: Iterable | None,
    layout: str | None = "auto",
    raid_device: str | None = DEFAULT_RAID_DEVICE,
    raid_mount: str | None = DEFAULT_RAID_MOUNT,
) -> list[Volume]:
    """What to build from ``megahour_nvme_devices`` and ``megahour_cache_dirs``; ValueError names the fix.

    An unset (None or empty) layout, array device or array mount point takes its default, as the
    inventory leaves them."""
    devices = list(devices or [])
    layout = layout or "auto"
    raid_device = raid_device or DEFAULT_RAID_DEVICE
    raid_mount = raid_mount or DEFAULT_RAID_MOUNT
    if layout not in LAYOUTS:
        raise ValueError(f"megahour_cache_layout is {layout!r}; set it to one of {', '.join(LAYOUTS)}")
    if not devices:
        return []
    if len(set(devices)) != len(devices):
        raise ValueError(f"megahour_nvme_devices lists a device twice: {devices}")
    parents = _parents(cache_dirs)
    if not parents:
        raise ValueError(
            "megahour_nvme_devices is set but megahour_cache_dirs is empty; "
            "list the cache directories on those devices"
        )
    if layout == "auto":
        layout = "per_device" if len(parents) == len(devices) else "raid0"
    if layout == "per_device":
        if len(parents) != len(devices):
            raise ValueError(
                "megahour_cache_layout per_device needs one cache directory parent a device: "
                f"{len(devices)} devices, parents {parents}; list one cache directory a device "
                "(/mnt/nvme0/alluxio, ...) or use raid0"
            )
        return [Volume(d, m) for d, m in zip(devices, parents, strict=True)]
    outside = [p for p in parents if not _under(p, raid_mount)]
    if outside:
        raise ValueError(
            f"megahour_cache_layout raid0 mounts one array at {raid_mount}, but cache directories are under "
            f"{outside}; put them under {raid_mount} or set megahour_cache_raid_mount"
        )
    if len(devices) == 1:
        return [Volume(devices[0], raid_mount)]
    return [Volume(raid_device, raid_mount, tuple(devices))]


def required_mounts(volumes: Iterable[Volume], image_mounts: Iterable[str] | None = ()) -> list[str]:
    """The mount points that must be mounts on a compute node: the planned volumes' and the image's, in
    order, each once. The health gate drains a node where one is missing (the cache would fill the root
    disk)."""
    out: list[str] = []
    for path in [v.mount for v in volumes] + list(image_mounts or []):
        if not isinstance(path, str) or not path.startswith("/"):
            raise ValueError(f"megahour_cache_mounts: {path!r} is not an absolute path")
        path = path.rstrip("/") or "/"
        if path not in out:
            out.append(path)
    return out


def mdadm_create_argv(volume: Volume) -> list[str]:
    """The mdadm command that assembles ``volume``'s members as RAID0 (run only when it does not exist)."""
    if len(volume.members) < 2:
        raise ValueError(f"{volume.device}: a RAID0 array needs two devices or more")
    return [
        "mdadm",
        "--create",
        volume.device,
        "--run",
        "--level=0",
        f"--chunk={RAID_CHUNK_KIB}",
        f"--raid-devices={len(volume.members)}",
        *volume.members,
    ]


def format_decision(fstype: str | None, force: bool = False) -> str:
    """What to do with a device whose ``blkid`` TYPE is ``fstype``: ``keep`` XFS, ``format`` an empty
    device, ``refuse`` anything else unless ``force`` (never reformat a filesystem by default)."""
    fstype = (fstype or "").strip()
    if fstype == "xfs":
        return "keep"
    if fstype == "" or force:
        return "format"
    return "refuse"
