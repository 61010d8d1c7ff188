"""What a deploy needs from each host, compared with what the probe found. Pure: no I/O.

Each check is PASS, WARN (worth knowing, does not block), SKIP (does not apply, with why) or FAIL (a
blocker, with its fix). The order of ``CHECKS`` is the order a person fixes things in: reach the host,
its OS and Python, the GPUs and driver, the fabric, the disks, the shared filesystem, the clock.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any

from megahour.doctor.facts import MISSING_COMMAND, HostFacts
from megahour.health import rdma
from megahour.health.rdma import RdmaRule
from megahour.health.verdict import Status as VerdictStatus
from megahour.inventory.fabric import health_rule
from megahour.inventory.fabric import parse as parse_fabric
from megahour.inventory.platforms import PLATFORMS, RUNTIME_MIN_PYTHON
from megahour.inventory.profiles import VARIABLE as PROFILES_VARIABLE
from megahour.inventory.profiles import GpuProfile, ProfileError, profile_for
from megahour.inventory.validate import COMPUTE_GROUP, DEFAULT_SHARED_ROOT, cache_dirs_variable

# Free space the root filesystem needs for the runtime, Slurm's state and logs (the trainer's wheels
# live on the shared filesystem).
DEFAULT_MIN_FREE_GIB = 10.0
# A clock further than this outside the window the control node measured around the probe is skewed.
DEFAULT_CLOCK_TOLERANCE_S = 2.0
CHECKS = (
    "reachable",
    "os",
    "python",
    "arch",
    "gpu_count",
    "gpu_model",
    "driver",
    "fabric",
    "rdma",
    "nvme",
    "cache_dirs",
    "shared_fs",
    "disk",
    "time_sync",
    "clock",
    "version",
)


# The fix for each way the RDMA check fails (megahour.health.rdma's reasons).
RDMA_FIXES = {
    "rdma_device_missing": "fix megahour_fabric.hcas (ibv_devices lists the host's HCAs)",
    "rdma_link_layer_mismatch": "fix megahour_fabric.type (infiniband or roce), or the HCAs it names",
    "rdma_link_down": "check the port's cable and the subnet manager (ibstat; for RoCE, the switch port)",
    "rdma_rate_low": "reseat or replace the cable, or lower megahour_fabric.rate_gbps",
    "rdma_unreadable": "check the RDMA driver is loaded and sysfs is readable (ibstat)",
}


class Status(enum.StrEnum):
    PASS = "pass"
    WARN = "warn"
    SKIP = "skip"
    FAIL = "fail"


@dataclass(frozen=True)
class Check:
    host: str
    name: str
    status: Status
    message: str
    fix: str = ""

    @property
    def blocks(self) -> bool:
        return self.status is Status.FAIL

    def render(self) -> str:
        tail = f". Fix: {self.fix}" if self.fix else ""
        return f"{self.host}: {self.name}: {self.message}{tail}"

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["status"] = self.status.value
        return out


@dataclass(frozen=True)
class HostExpect:
    """What the inventory says this host is (its megahour_* variables and the merged GPU profiles)."""

    host: str
    compute: bool
    os: str | None = None
    gpu_model: str | None = None
    gpu_count: int = 0
    profile: GpuProfile | None = None
    fabric_type: str = "none"
    fabric_interface: str | None = None
    rdma: RdmaRule | None = None  # the health gate's rule for the node's RDMA ports; None off RDMA
    nvme_devices: tuple[str, ...] = ()
    cache_dirs: tuple[str, ...] = ()
    shared_root: str = DEFAULT_SHARED_ROOT
    time_sync: bool = True
    problems: tuple[str, ...] = field(default=())  # inventory values doctor could not use


def expect_from_snapshot(snapshot: dict[str, Any], host: str) -> HostExpect:
    groups = snapshot.get("groups", {})
    hv = snapshot.get("hosts", {}).get(host, {})
    problems: list[str] = []
    compute = host in (groups.get(COMPUTE_GROUP) or [])
    gpu = hv.get("megahour_gpu") if isinstance(hv.get("megahour_gpu"), dict) else {}
    model = gpu.get("model")
    profile = None
    if compute and model is not None:
        try:
            profile = profile_for(model, hv.get(PROFILES_VARIABLE))
        except ProfileError as exc:
            problems.append(str(exc))
    fabric = hv.get("megahour_fabric") if isinstance(hv.get("megahour_fabric"), dict) else {}
    dirs_var = hv.get(cache_dirs_variable(hv)) or []
    cache_dirs = (
        tuple(d["path"] for d in dirs_var if isinstance(d, dict) and isinstance(d.get("path"), str))
        if isinstance(dirs_var, list)
        else ()
    )
    count = gpu.get("count", 0)
    return HostExpect(
        host=host,
        compute=compute,
        os=hv.get("megahour_os") if isinstance(hv.get("megahour_os"), str) else None,
        gpu_model=str(model) if model is not None else None,
        gpu_count=count if isinstance(count, int) and not isinstance(count, bool) else 0,
        profile=profile,
        fabric_type=str(fabric.get("type", "none")),
        fabric_interface=fabric.get("interface") or None,
        rdma=_rdma_rule(fabric, problems) if compute else None,
        nvme_devices=tuple(d for d in hv.get("megahour_nvme_devices") or [] if isinstance(d, str)),
        cache_dirs=cache_dirs if compute else (),
        shared_root=str(hv.get("megahour_shared_root") or DEFAULT_SHARED_ROOT),
        time_sync=str(hv.get("common_time_sync_enabled", True)).strip().lower() not in ("false", "no", "0"),
        problems=tuple(problems),
    )


def _rdma_rule(fabric: dict[str, Any], problems: list[str]) -> RdmaRule | None:
    """The RDMA ports the health gate will check, from megahour_fabric (inventory.fabric.health_rule)."""
    try:
        rule = health_rule(parse_fabric(fabric)) if fabric else None
    except ValueError as exc:
        problems.append(str(exc))
        return None
    if rule is None:
        return None
    rate = rule["min_rate_gbps"]
    return RdmaRule(rule["link_layer"], tuple(rule["devices"]), None if rate is None else float(rate))


def unreachable(host: str, message: str) -> Check:
    return Check(
        host,
        "reachable",
        Status.FAIL,
        f"Ansible cannot run commands there ({first_line(message) or 'no reason given'})",
        "check ansible_host, ansible_user and the SSH key "
        "(ansible -i INVENTORY HOST -m ansible.builtin.ping)",
    )


def first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0].strip() if lines else ""


def _driver_branch(version: str) -> int | None:
    head = version.strip().split(".", 1)[0]
    return int(head) if head.isdigit() else None


def _section_missing(facts: HostFacts, name: str) -> str:
    section = facts.sections.get(name)
    if section is None:
        return "the probe printed no such section"
    if section.rc == MISSING_COMMAND:
        return "the command is not installed"
    reason = facts.unreadable.get(name) or (section.text.strip().splitlines() or ["no output"])[-1]
    return f"exit {section.rc}: {reason[:160]}"


class _Host:
    """The checks of one host; each method returns one Check."""

    def __init__(
        self, expect: HostExpect, facts: HostFacts, window: tuple[float, float] | None, options: dict
    ):
        self.e, self.f, self.window, self.options = expect, facts, window, options

    def ok(self, name: str, message: str) -> Check:
        return Check(self.e.host, name, Status.PASS, message)

    def fail(self, name: str, message: str, fix: str) -> Check:
        return Check(self.e.host, name, Status.FAIL, message, fix)

    def warn(self, name: str, message: str, fix: str = "") -> Check:
        return Check(self.e.host, name, Status.WARN, message, fix)

    def skip(self, name: str, why: str) -> Check:
        return Check(self.e.host, name, Status.SKIP, why)

    def os(self) -> Check:
        found = self.f.platform
        if found is None:
            return self.fail(
                "os",
                f"cannot read /etc/os-release ({_section_missing(self.f, 'os_release')})",
                "give the host a standard /etc/os-release (systemd's base-files)",
            )
        platform = PLATFORMS.get(found)
        if self.e.os is not None and found != self.e.os:
            return self.fail(
                "os",
                f"runs {found}, the inventory says megahour_os {self.e.os}",
                "fix megahour_os in group_vars/all.yml, or reimage the host",
            )
        if platform is None or not platform.runtime_ok:
            supported = ", ".join(n for n, p in PLATFORMS.items() if p.runtime_ok)
            return self.fail(
                "os", f"{found} is not an image megahour deploys on", f"ask the vendor for {supported}"
            )
        note = "" if platform.exercised else " (accepted, not exercised in CI)"
        return self.ok("os", f"{found}{note}")

    def python(self) -> Check:
        need = ".".join(map(str, RUNTIME_MIN_PYTHON))
        if self.f.python is None:
            return self.fail(
                "python",
                f"no usable python3 ({_section_missing(self.f, 'python')})",
                f"install python3 {need} or newer and python3-venv from the image's archive",
            )
        found = ".".join(map(str, self.f.python))
        if self.f.python[:2] < RUNTIME_MIN_PYTHON:
            return self.fail(
                "python",
                f"python3 is {found}; the megahour runtime needs {need} or newer",
                "use an image whose python3 is newer (megahour inventory validate lists them)",
            )
        return self.ok("python", f"python3 {found}")

    def arch(self) -> Check:
        if self.f.arch is None:
            return self.warn("arch", f"unknown CPU architecture ({_section_missing(self.f, 'arch')})")
        if self.e.profile is not None and self.f.arch != self.e.profile.host_arch:
            return self.fail(
                "arch",
                f"{self.f.arch} host, the {self.e.profile.model} profile says {self.e.profile.host_arch}",
                f"check megahour_gpu.model, or set megahour_gpu_profiles.{self.e.profile.model}"
                f".host_arch: {self.f.arch}",
            )
        return self.ok("arch", self.f.arch)

    def gpu_checks(self) -> list[Check]:
        names = ("gpu_count", "gpu_model", "driver")
        if not self.e.compute:
            return [self.skip(n, "not a compute node") for n in names]
        if self.e.profile is None:
            why = "; ".join(self.e.problems) or f"no GPU profile for megahour_gpu.model {self.e.gpu_model!r}"
            return [self.fail("gpu_count", why, "run megahour inventory validate and fix what it names")] + [
                self.skip(n, "no profile to compare with") for n in names[1:]
            ]
        p = self.e.profile
        if self.f.gpus is None:
            reason = _section_missing(self.f, "nvidia_smi")
            return [
                self.fail(
                    "gpu_count",
                    f"nvidia-smi does not answer ({reason})",
                    f"install the NVIDIA driver, branch {p.min_driver_branch} or newer, and check the GPUs "
                    "are seen (nvidia-smi -L)",
                )
            ] + [self.skip(n, "nvidia-smi did not answer") for n in names[1:]]
        out = []
        count = len(self.f.gpus)
        if count != self.e.gpu_count:
            out.append(
                self.fail(
                    "gpu_count",
                    f"{count} GPUs visible, the inventory declares {self.e.gpu_count}",
                    "find the missing GPU (nvidia-smi -L, dmesg for Xid/fallen off the bus) or "
                    "fix megahour_gpu.count",
                )
            )
        else:
            out.append(self.ok("gpu_count", f"{count} GPUs"))
        strangers = sorted({g.name for g in self.f.gpus if not p.matches(g.name)})
        if strangers:
            out.append(
                self.fail(
                    "gpu_model",
                    f"GPU model {strangers} is not {p.model} ({list(p.product_names)})",
                    f"fix megahour_gpu.model, or add the name to megahour_gpu_profiles.{p.model}"
                    ".product_names",
                )
            )
        else:
            names_seen = sorted({g.name for g in self.f.gpus})
            out.append(self.ok("gpu_model", ", ".join(names_seen) or "no GPUs"))
        versions = sorted({g.driver_version for g in self.f.gpus})
        branches = [_driver_branch(v) for v in versions]
        if not versions or any(b is None for b in branches):
            out.append(
                self.fail(
                    "driver",
                    f"unreadable driver version {versions}",
                    "check the NVIDIA driver is loaded (nvidia-smi)",
                )
            )
        elif min(b for b in branches if b is not None) < p.min_driver_branch:
            out.append(
                self.fail(
                    "driver",
                    f"driver {', '.join(versions)} is older than branch {p.min_driver_branch}, "
                    f"the oldest that supports {p.model}",
                    f"install driver branch {p.min_driver_branch} or newer",
                )
            )
        else:
            out.append(self.ok("driver", f"{', '.join(versions)} (needs {p.min_driver_branch}+)"))
        return out

    def fabric(self) -> Check:
        if not self.e.compute:
            return self.skip("fabric", "not a compute node")
        if self.e.fabric_type == "none" or not self.e.fabric_interface:
            return self.skip("fabric", "megahour_fabric.type is none")
        name = self.e.fabric_interface
        if self.f.links is None:
            return self.fail(
                "fabric",
                f"cannot list links ({_section_missing(self.f, 'ip_link')})",
                "install iproute2 on the image",
            )
        link = self.f.links.get(name)
        if link is None:
            have = ", ".join(sorted(n for n in self.f.links if n != "lo")) or "none"
            return self.fail(
                "fabric",
                f"{self.e.fabric_type} interface {name} does not exist (links: {have})",
                "fix megahour_fabric.interface, or ask the vendor to bring the fabric NIC up",
            )
        if not link.up:
            return self.fail(
                "fabric",
                f"{name} is {link.operstate}",
                f"bring it up (ip link set {name} up) and check its cable or bond members",
            )
        return self.ok("fabric", f"{name} up")

    def rdma(self) -> Check:
        """The RDMA ports as the health gate judges them (megahour.health.rdma), before any job does."""
        if not self.e.compute:
            return self.skip("rdma", "not a compute node")
        if self.e.rdma is None:
            return self.skip("rdma", f"megahour_fabric.type is {self.e.fabric_type}, not RDMA")
        if self.f.rdma_ports is None:
            return self.fail(
                "rdma",
                f"cannot read the RDMA ports ({_section_missing(self.f, 'rdma')})",
                "check the RDMA driver is loaded (ls /sys/class/infiniband)",
            )
        verdict = rdma.check(self.f.rdma_ports, self.f.rdma_errors, self.e.rdma)
        if verdict.status == VerdictStatus.PASS:
            return self.ok("rdma", verdict.message)
        return self.fail(
            "rdma",
            f"{verdict.reason}: {verdict.message}",
            RDMA_FIXES.get(verdict.reason, "read ibstat on the host"),
        )

    def nvme(self) -> Check:
        if not self.e.compute:
            return self.skip("nvme", "not a compute node")
        if not self.e.nvme_devices:
            return self.skip("nvme", "megahour_nvme_devices is empty (the cache uses directories)")
        if self.f.block_devices is None:
            return self.fail(
                "nvme",
                f"cannot list block devices ({_section_missing(self.f, 'lsblk')})",
                "install util-linux (lsblk) on the image",
            )
        by_path = {d.path: d for d in self.f.block_devices}
        cache = tuple(d.rstrip("/") for d in self.e.cache_dirs)
        notes = []
        for dev in self.e.nvme_devices:
            device = by_path.get(dev)
            if device is None:
                return self.fail(
                    "nvme",
                    f"{dev} does not exist",
                    "fix megahour_nvme_devices (lsblk lists the host's disks)",
                )
            used = [d for d in self.f.block_devices if d.path == dev or d.parent == dev]
            mounted = [d.mountpoint for d in used if d.mountpoint]
            for point in mounted:
                top = point.rstrip("/")
                # A device holding / (or another system path) is not free for the cache, whatever is below it.
                if not top or not any(c == top or c.startswith(top + "/") for c in cache):
                    return self.fail(
                        "nvme",
                        f"{dev} is in use, mounted at {point}",
                        "give the cache NVMe devices nothing else uses, or fix megahour_nvme_devices",
                    )
            if mounted:
                notes.append(f"{dev} at {', '.join(mounted)}")
            elif any(d.fstype for d in used):
                notes.append(f"{dev} formatted, not mounted")
            else:
                notes.append(f"{dev} unused")
        return self.ok("nvme", "; ".join(notes))

    def cache_dirs(self) -> Check:
        if not self.e.compute:
            return self.skip("cache_dirs", "not a compute node")
        if not self.e.cache_dirs:
            return self.fail("cache_dirs", "megahour_cache_dirs is empty", "list one {path, size} per NVMe")
        if self.f.mounts is None:
            return self.fail(
                "cache_dirs",
                f"cannot list mounts ({_section_missing(self.f, 'findmnt')})",
                "install util-linux (findmnt) on the image",
            )
        notes = []
        for path in self.e.cache_dirs:
            path = path.rstrip("/")
            parent = path.rsplit("/", 1)[0] or "/"
            mount = self.f.mount_of(path)
            on_own_fs = self.f.is_mount_point(path) or self.f.is_mount_point(parent)
            if self.e.nvme_devices:
                devices = set(self.e.nvme_devices)
                source_ok = mount is not None and any(mount.source.startswith(d) for d in devices)
                if not source_ok:
                    where = f"{mount.source} at {mount.target}" if mount else "an unknown filesystem"
                    return self.fail(
                        "cache_dirs",
                        f"{path} is on {where}, not on one of {sorted(devices)}",
                        f"format the NVMe and mount it at {parent} (or at {path})",
                    )
            elif not (on_own_fs or self._exists(path)):
                return self.fail(
                    "cache_dirs",
                    f"{path} does not exist and {parent} is not a mount point",
                    f"mount the NVMe filesystem at {parent}, or create the directory that stands in for it",
                )
            notes.append(f"{path} on {mount.target if mount else '?'}")
        return self.ok("cache_dirs", "; ".join(notes))

    def _exists(self, path: str) -> bool:
        return self.f.paths.get(path) == "dir"

    def shared_fs(self) -> Check:
        root = self.e.shared_root.rstrip("/")
        if self.f.mounts is None:
            return self.fail(
                "shared_fs",
                f"cannot list mounts ({_section_missing(self.f, 'findmnt')})",
                "install util-linux (findmnt) on the image",
            )
        if not self.f.is_mount_point(root):
            mount = self.f.mount_of(root)
            if self.f.paths.get(root) == "missing":
                on = " (the directory does not exist)"
            else:
                on = f" (it is a directory on {mount.target})" if mount else ""
            return self.fail(
                "shared_fs",
                f"the shared filesystem is not mounted at {root}{on}",
                f"mount it at {root} on every host (or set megahour_shared_root to where it is)",
            )
        mount = self.f.mount_of(root)
        return self.ok("shared_fs", f"{root}: {mount.fstype} from {mount.source}" if mount else root)

    def disk(self) -> Check:
        need = float(self.options.get("min_free_gib", DEFAULT_MIN_FREE_GIB))
        if self.f.root_free_kib is None:
            return self.fail(
                "disk",
                f"cannot read free space on / ({_section_missing(self.f, 'df')})",
                "check df -P / works on the host",
            )
        free = self.f.root_free_kib / 1024 / 1024
        if free < need:
            return self.fail(
                "disk",
                f"{free:.1f} GiB free on /, the deploy needs {need:.0f} GiB",
                "free space on the root filesystem or ask for a larger boot disk",
            )
        return self.ok("disk", f"{free:.0f} GiB free on /")

    def time_sync(self) -> Check:
        if not self.e.time_sync:
            return self.skip(
                "time_sync", "common_time_sync_enabled is false (the host's clock is not megahour's)"
            )
        values = self.f.timesync or {}
        if values.get("NTPSynchronized") == "yes":
            return self.ok("time_sync", "NTP synchronized")
        return self.fail(
            "time_sync",
            f"the clock is not NTP-synchronized ({values or _section_missing(self.f, 'timesync')})",
            "enable time sync (the common role installs chrony; timedatectl set-ntp true) and wait for it",
        )

    def clock(self) -> Check:
        if self.f.clock is None or self.window is None:
            return self.warn("clock", "cannot compare the host's clock with the control node's")
        start, end = self.window
        tolerance = float(self.options.get("clock_tolerance_s", DEFAULT_CLOCK_TOLERANCE_S))
        skew = max(start - self.f.clock, self.f.clock - end, 0.0)
        if skew > tolerance:
            return self.fail(
                "clock",
                f"the clock is {skew:.1f} s off the control node's",
                "synchronize the clocks (NTP); Slurm's credentials and munge fail beyond a few seconds",
            )
        return self.ok("clock", f"within {tolerance:.0f} s of the control node (window {end - start:.1f} s)")

    def version(self) -> Check:
        if self.f.version is None:
            return self.skip("version", "megahour is not deployed here yet (no /etc/megahour/version)")
        return self.ok("version", self.f.version)


def check_host(
    expect: HostExpect,
    facts: HostFacts,
    window: tuple[float, float] | None = None,
    **options: Any,
) -> list[Check]:
    """Every check of ``CHECKS`` for one reachable host, in that order."""
    h = _Host(expect, facts, window, options)
    out = [
        h.ok("reachable", "commands run"),
        h.os(),
        h.python(),
        h.arch(),
        *h.gpu_checks(),
        h.fabric(),
        h.rdma(),
        h.nvme(),
        h.cache_dirs(),
        h.shared_fs(),
        h.disk(),
        h.time_sync(),
        h.clock(),
        h.version(),
    ]
    assert [c.name for c in out] == list(CHECKS)
    return out


def first_blocker(checks: list[Check]) -> Check | None:
    return next((c for c in checks if c.blocks), None)
