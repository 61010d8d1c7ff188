"""Validate an inventory snapshot before any host is touched.

A snapshot is ``{"groups": {name: [hosts]}, "hosts": {host: {var: value}}}``:
the groups and each host's ``megahour_*`` variables, as Ansible resolves them.
Each finding names the variable, the host where it applies, and the fix. ``group_findings`` folds the
findings many hosts share (same variable, message and fix) into one, for the lines people read; the
findings themselves stay one per host.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from megahour.inventory import cache_volumes, fabric
from megahour.inventory.platforms import PLATFORMS, RUNTIME_MIN_PYTHON, supported
from megahour.inventory.profiles import VARIABLE as PROFILES_VARIABLE
from megahour.inventory.profiles import ProfileError, merged_profiles

CONTROLLER_GROUP = "controller"
COMPUTE_GROUP = "compute"
CLUSTER_GROUP = "cluster"
# Groups whose first host runs a service, and the variable that names the host instead.
SERVICE_GROUPS = {"warehouse": "warehouse_host", "airflow": "airflow_host"}
# Groups the playbooks may target that an inventory need not have (`megahour cluster up --remote-store`).
OPTIONAL_GROUPS = ("storage",)
# Connections that log in as the control node's user to a host that is not reached over SSH.
LOCAL_CONNECTIONS = (
    "local",
    "podman",
    "containers.podman.podman",
    "megahour_podman",
    "docker",
    "community.docker.docker",
)
DEFAULT_SHARED_ROOT = "/srv/megahour"
# The under-stores the cache tier's distribution carries (roles/alluxio alluxio_artifacts: underfs-s3a).
UFS_SCHEMES = ("s3", "s3a")
UFS_URL_RE = re.compile(r"^(?P<scheme>[a-z][a-z0-9+.-]*)://(?P<bucket>[^/]*)(?P<path>/.*)?$")
BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
# What the alluxio role's validate task accepts.
CACHE_SIZE_RE = re.compile(r"^[0-9]+(KB|MB|GB|TB)$")
# Variables validation reads besides megahour_*: the snapshot (playbooks/validate.yml and
# megahour.inventory.source) carries exactly these.
SNAPSHOT_EXTRA_VARS = (
    "ansible_user",
    "ansible_become",
    "ansible_connection",
    "ansible_python_interpreter",
    "alluxio_root_ufs",
    "alluxio_worker_page_dirs",
    "warehouse_host",
    "airflow_host",
)
# Slurm node names are the inventory names; Slurm wants short host names.
NODE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")


@dataclass(frozen=True)
class Finding:
    variable: str
    message: str
    fix: str
    host: str | None = None

    def render(self) -> str:
        where = f" (host {self.host})" if self.host else ""
        return f"{self.variable}{where}: {self.message}. Fix: {self.fix}"

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class FindingGroup:
    """One problem and every host that has it (none for an inventory-wide problem)."""

    variable: str
    message: str
    fix: str
    hosts: tuple[str, ...] = ()

    def render(self) -> str:
        if not self.hosts:
            where = ""
        elif len(self.hosts) == 1:
            where = f" (host {self.hosts[0]})"
        else:
            where = f" ({len(self.hosts)} hosts: {host_ranges(self.hosts)})"
        return f"{self.variable}{where}: {self.message}. Fix: {self.fix}"


def group_findings(findings: Iterable[Finding]) -> list[FindingGroup]:
    """Findings with the same variable, message and fix as one group each, in first-seen order."""
    hosts: dict[tuple[str, str, str], list[str]] = {}
    for f in findings:
        seen = hosts.setdefault((f.variable, f.message, f.fix), [])
        if f.host is not None and f.host not in seen:
            seen.append(f.host)
    return [FindingGroup(variable, message, fix, tuple(h)) for (variable, message, fix), h in hosts.items()]


def render_grouped(findings: Iterable[Finding]) -> list[str]:
    """One line per distinct problem, naming all the hosts that have it."""
    return [group.render() for group in group_findings(findings)]


_NUMBERED = re.compile(r"^(.*?)([0-9]+)$")


def host_ranges(hosts: Sequence[str]) -> str:
    """Host names as a Slurm-style host list: ``gpu[001-004,009],head01``. Names ending in digits
    share brackets when they have the same prefix and digit count; the others are listed as they are."""
    numbers: dict[tuple[str, int], list[int]] = {}
    order: list[str | tuple[str, int]] = []
    for host in hosts:
        m = _NUMBERED.match(host)
        if m is None:
            order.append(host)
            continue
        key = (m.group(1), len(m.group(2)))
        if key not in numbers:
            numbers[key] = []
            order.append(key)
        numbers[key].append(int(m.group(2)))
    parts = []
    for item in order:
        if isinstance(item, str):
            parts.append(item)
            continue
        prefix, width = item
        values = sorted(set(numbers[item]))
        if len(values) == 1:
            parts.append(f"{prefix}{values[0]:0{width}d}")
            continue
        spans, start, prev = [], values[0], values[0]
        for value in [*values[1:], None]:
            if value is not None and value == prev + 1:
                prev = value
                continue
            spans.append(f"{start:0{width}d}" if start == prev else f"{start:0{width}d}-{prev:0{width}d}")
            if value is not None:
                start = prev = value
        parts.append(f"{prefix}[{','.join(spans)}]")
    return ",".join(parts)


def validate(snapshot: dict[str, Any]) -> list[Finding]:
    groups: dict[str, list[str]] = snapshot.get("groups", {})
    hostvars: dict[str, dict[str, Any]] = snapshot.get("hosts", {})
    findings: list[Finding] = []

    controllers = groups.get(CONTROLLER_GROUP)
    if controllers is None:
        findings.append(
            Finding(
                f"groups.{CONTROLLER_GROUP}",
                "the inventory has no controller group",
                f"add a '{CONTROLLER_GROUP}' group holding the Slurm controller host "
                "(see inventories/example-baremetal-h100/hosts.yml)",
            )
        )
    elif len(controllers) not in (1, 2):
        findings.append(
            Finding(
                f"groups.{CONTROLLER_GROUP}",
                f"the controller group has {len(controllers)} hosts ({', '.join(controllers) or 'none'})",
                "put one host in the controller group, or two for a backup slurmctld (the primary first)",
            )
        )

    compute = groups.get(COMPUTE_GROUP) or []
    if not compute:
        findings.append(
            Finding(
                f"groups.{COMPUTE_GROUP}",
                "the inventory declares zero compute nodes",
                f"add at least one GPU host to the '{COMPUTE_GROUP}' group",
            )
        )
    members = list(dict.fromkeys([*(controllers or []), *compute]))
    findings += _check_groups(groups, hostvars, members)

    for host in members:
        if not NODE_NAME_RE.match(host):
            findings.append(
                Finding(
                    "inventory_hostname",
                    f"'{host}' is not a valid Slurm node name",
                    "use the short host name as the inventory name and put the address in ansible_host",
                    host,
                )
            )

    for host in compute:
        findings += _check_compute_host(host, hostvars.get(host, {}))
    for host in members:
        hv = hostvars.get(host, {})
        findings += _check_os(host, hv)
        findings += _check_access(host, hv)
        findings += _check_shared_root(host, hv)
    for host in controllers or []:
        findings += _check_under_store(host, hostvars.get(host, {}))
    return findings


def _check_groups(
    groups: dict[str, list[str]], hostvars: dict[str, dict[str, Any]], members: list[str]
) -> list[Finding]:
    """The `cluster` parent group every play targets, and the service groups the roles take a host from."""
    findings: list[Finding] = []
    cluster = groups.get(CLUSTER_GROUP)
    if cluster is None:
        findings.append(
            Finding(
                f"groups.{CLUSTER_GROUP}",
                "the inventory has no cluster group, which every play of site.yml targets",
                f"make '{CONTROLLER_GROUP}' and '{COMPUTE_GROUP}' children of a '{CLUSTER_GROUP}' group "
                "(all: children: cluster: children: [controller, compute]; "
                "see inventories/example-baremetal-h100)",
            )
        )
    else:
        outside = [h for h in members if h not in cluster]
        if outside:
            findings.append(
                Finding(
                    f"groups.{CLUSTER_GROUP}",
                    f"{len(outside)} controller or compute host(s) are not in the cluster group "
                    f"({host_ranges(outside)}), so no play would set them up",
                    f"make '{CONTROLLER_GROUP}' and '{COMPUTE_GROUP}' children of '{CLUSTER_GROUP}'",
                )
            )
    for group, override in SERVICE_GROUPS.items():
        if groups.get(group) or any(hv.get(override) for hv in hostvars.values()):
            continue
        what = "an empty" if group in groups else "no"
        findings.append(
            Finding(
                f"groups.{group}",
                f"the inventory has {what} '{group}' group; the {group} role runs its server on the group's "
                "first host",
                f"add '{group}: {{hosts: {{<controller>: }}}}' under all: children: "
                "(the controller can carry it), "
                f"or set {override} to an inventory host",
            )
        )
    return findings


def _check_access(host: str, hv: dict[str, Any]) -> list[Finding]:
    """A non-root login must be allowed to become root: every role installs packages and services."""
    user = hv.get("ansible_user")
    connection = hv.get("ansible_connection")
    if connection in LOCAL_CONNECTIONS or user in (None, "", "root"):
        findings: list[Finding] = []
    elif not _truthy(hv.get("ansible_become")) and not unrendered(hv.get("ansible_become")):
        findings = [
            Finding(
                "ansible_become",
                f"ansible_user is {user!r} and become is off, "
                "but the roles install packages and services as root",
                "set ansible_become: true beside ansible_user in group_vars/all.yml (the user needs sudo), "
                "or log in as root",
                host,
            )
        ]
    else:
        findings = []
    interpreter = hv.get("ansible_python_interpreter")
    if (
        isinstance(interpreter, str)
        and "{{" not in interpreter
        and not interpreter.startswith("auto")
        and not interpreter.startswith("/")
    ):
        findings.append(
            Finding(
                "ansible_python_interpreter",
                f"{interpreter!r} is neither an absolute path nor auto",
                "remove it (Ansible finds the image's python3) or set the absolute path, "
                "for example /usr/bin/python3",
                host,
            )
        )
    return findings


def _check_shared_root(host: str, hv: dict[str, Any]) -> list[Finding]:
    root = hv.get("megahour_shared_root", DEFAULT_SHARED_ROOT)
    if unrendered(root) or (isinstance(root, str) and root.startswith("/") and root.rstrip("/") != ""):
        return []
    return [
        Finding(
            "megahour_shared_root",
            f"{root!r} is not an absolute directory below /",
            "set megahour_shared_root to where every node mounts the shared filesystem, "
            "for example /srv/megahour",
            host,
        )
    ]


def _check_under_store(host: str, hv: dict[str, Any]) -> list[Finding]:
    url = hv.get("alluxio_root_ufs")
    fix = (
        "set alluxio_root_ufs in group_vars/all.yml to the bucket the episodes live in, "
        "s3://BUCKET/PREFIX (credentials in alluxio_site_config), or a directory every node mounts"
    )
    if not isinstance(url, str) or not url.strip():
        return [Finding("alluxio_root_ufs", "the cache tier's under-store is not set", fix, host)]
    url = url.strip()
    if url.startswith("/") or unrendered(url):
        return []
    m = UFS_URL_RE.match(url)
    if m is None:
        return [
            Finding(
                "alluxio_root_ufs",
                f"{url!r} is neither an absolute directory nor a URL",
                fix,
                host,
            )
        ]
    scheme, bucket = m.group("scheme"), m.group("bucket")
    if scheme not in UFS_SCHEMES:
        return [
            Finding(
                "alluxio_root_ufs",
                f"the {scheme}:// under-store is not built into the cache tier "
                f"(it has {', '.join(UFS_SCHEMES)})",
                fix,
                host,
            )
        ]
    if "CHANGE-ME" in bucket or not BUCKET_RE.match(bucket):
        return [
            Finding(
                "alluxio_root_ufs",
                f"{bucket!r} is not a bucket name "
                "(lower-case letters, digits, '.' and '-', 3 to 63 characters)",
                fix,
                host,
            )
        ]
    return []


def unrendered(value: Any) -> bool:
    """A value holding a Jinja expression (`ansible-inventory --list` leaves them as written; the validate
    play sees them rendered, and the scaffold refuses them)."""
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def _check_compute_host(host: str, hv: dict[str, Any]) -> list[Finding]:
    findings: list[Finding] = []
    try:
        profiles = merged_profiles(hv.get(PROFILES_VARIABLE))
    except ProfileError as exc:
        findings.append(Finding(exc.variable, exc.message, exc.fix, host))
        profiles = merged_profiles()
    models = ", ".join(sorted(profiles))
    gpu = hv.get("megahour_gpu")
    if not isinstance(gpu, dict):
        findings.append(
            Finding(
                "megahour_gpu",
                "is not set for this compute node",
                f"set megahour_gpu: {{model: <one of {models}>, count: <GPUs per node>}} "
                "in group_vars/compute.yml",
                host,
            )
        )
    else:
        model = gpu.get("model")
        profile = profiles.get(str(model).strip().lower()) if model is not None else None
        if profile is None:
            findings.append(
                Finding(
                    "megahour_gpu.model",
                    f"unknown GPU model {model!r}",
                    f"use one of {models}, or define it in {PROFILES_VARIABLE} in group_vars "
                    "(docs/onboarding.md, GPU profiles)",
                    host,
                )
            )
        count = gpu.get("count")
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            findings.append(
                Finding(
                    "megahour_gpu.count",
                    f"{count!r} is not a positive whole number of GPUs",
                    "set megahour_gpu.count to the GPUs per node, for example 8",
                    host,
                )
            )
        elif profile is not None and count not in profile.counts_per_node:
            shapes = ", ".join(map(str, profile.counts_per_node))
            findings.append(
                Finding(
                    "megahour_gpu.count",
                    f"{count} GPUs per node does not match the {profile.model} profile ({shapes})",
                    f"set megahour_gpu.count to one of {shapes}, or add {count} to "
                    f"{PROFILES_VARIABLE}.{profile.model}.counts_per_node",
                    host,
                )
            )

    findings += [
        Finding(problem.variable, problem.message, problem.fix, host)
        for problem in fabric.problems(hv.get("megahour_fabric"))
    ]

    nvme = hv.get("megahour_nvme_devices", [])
    if not isinstance(nvme, list) or not all(isinstance(d, str) and d.startswith("/") for d in nvme):
        findings.append(
            Finding(
                "megahour_nvme_devices",
                f"must be a list of absolute paths (got {nvme!r})",
                "list the NVMe block devices or directories, for example [/dev/nvme0n1, /dev/nvme1n1]",
                host,
            )
        )
    findings += _check_cache_dirs(host, hv)
    if not findings:
        findings += _check_cache_volumes(host, hv)
    return findings


def _check_cache_volumes(host: str, hv: dict[str, Any]) -> list[Finding]:
    """What the storage role would refuse: a device list and cache directories that make no volume plan."""
    names = ("megahour_cache_layout", "megahour_cache_raid_mount", "megahour_cache_mounts")
    values = [hv.get(v) for v in names]
    if any(unrendered(v) for v in values):
        return []
    layout, raid_mount, image_mounts = values
    try:
        volumes = cache_volumes.plan(
            hv.get("megahour_nvme_devices") or [],
            hv.get(cache_dirs_variable(hv)) or [],
            layout,
            raid_mount=raid_mount,
        )
        cache_volumes.required_mounts(volumes, image_mounts or [])
    except (ValueError, TypeError, AttributeError) as exc:
        message, _, fix = str(exc).partition("; ")
        return [
            Finding(
                "megahour_nvme_devices",
                message,
                fix or "fix megahour_nvme_devices, megahour_cache_dirs and megahour_cache_mounts",
                host,
            )
        ]
    return []


def cache_dirs_variable(hv: dict[str, Any]) -> str:
    """Which variable holds a worker's page-store directories: the alluxio role's own setting wins over
    megahour_cache_dirs, as its default does."""
    return "alluxio_worker_page_dirs" if "alluxio_worker_page_dirs" in hv else "megahour_cache_dirs"


def _check_cache_dirs(host: str, hv: dict[str, Any]) -> list[Finding]:
    """The cache worker's page-store directories: what the alluxio role would refuse mid-deploy."""
    variable = cache_dirs_variable(hv)
    dirs = hv.get(variable)
    if unrendered(dirs):
        return []
    fix = (
        f"set {variable} to one entry per NVMe filesystem, "
        "[{path: /mnt/nvme0/alluxio, size: 3TB}, ...], size in KB, MB, GB or TB"
    )
    if not isinstance(dirs, list) or not dirs:
        return [
            Finding(variable, f"the cache worker has no page-store directories (got {dirs!r})", fix, host)
        ]
    findings = []
    paths = []
    for i, entry in enumerate(dirs):
        path = entry.get("path") if isinstance(entry, dict) else None
        size = entry.get("size") if isinstance(entry, dict) else None
        if not isinstance(path, str) or not path.startswith("/"):
            findings.append(Finding(f"{variable}[{i}].path", f"{path!r} is not an absolute path", fix, host))
        else:
            paths.append(path.rstrip("/"))
        if not isinstance(size, str) or not CACHE_SIZE_RE.match(size):
            findings.append(
                Finding(
                    f"{variable}[{i}].size",
                    f"{size!r} is not a size Alluxio reads (for example 3TB)",
                    fix,
                    host,
                )
            )
    duplicates = sorted({p for p in paths if paths.count(p) > 1})
    if duplicates:
        findings.append(
            Finding(
                variable,
                f"{', '.join(duplicates)} is listed more than once",
                "give each NVMe one entry",
                host,
            )
        )
    return findings


def _check_os(host: str, hv: dict[str, Any]) -> list[Finding]:
    os_name = hv.get("megahour_os")
    names = ", ".join(supported())
    if os_name is None:
        return [
            Finding(
                "megahour_os",
                "is not set, so the image's packages and Python cannot be checked before the deploy",
                f"set megahour_os in group_vars/all.yml to the image the vendor gives you: one of {names}",
                host,
            )
        ]
    platform = PLATFORMS.get(os_name) if isinstance(os_name, str) else None
    if platform is None:
        return [
            Finding("megahour_os", f"unsupported operating system {os_name!r}", f"use one of {names}", host)
        ]
    if not platform.runtime_ok:
        need = ".".join(map(str, RUNTIME_MIN_PYTHON))
        return [
            Finding(
                "megahour_os",
                f"{os_name} ships Python {platform.python_text}, "
                "and the megahour runtime every node runs needs "
                f"Python {need} or newer",
                f"ask the vendor for one of {names}",
                host,
            )
        ]
    return []
