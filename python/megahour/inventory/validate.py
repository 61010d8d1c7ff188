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

from megahour.inventory.profiles import PROFILES, known_models

CONTROLLER_GROUP = "controller"
COMPUTE_GROUP = "compute"
FABRIC_TYPES = ("infiniband", "roce", "ethernet", "none")
SUPPORTED_OS = ("debian-12", "ubuntu-22.04", "ubuntu-24.04")
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
    elif len(controllers) != 1:
        findings.append(
            Finding(
                f"groups.{CONTROLLER_GROUP}",
                f"the controller group has {len(controllers)} hosts ({', '.join(controllers) or 'none'})",
                "put exactly one host in the controller group (HA controllers are not supported yet)",
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

    for host in sorted(set(controllers or []) | set(compute)):
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
    for host in sorted(set(controllers or []) | set(compute)):
        findings += _check_os(host, hostvars.get(host, {}))
    return findings


def _check_compute_host(host: str, hv: dict[str, Any]) -> list[Finding]:
    findings: list[Finding] = []
    gpu = hv.get("megahour_gpu")
    if not isinstance(gpu, dict):
        findings.append(
            Finding(
                "megahour_gpu",
                "is not set for this compute node",
                f"set megahour_gpu: {{model: <one of {', '.join(known_models())}>, count: <GPUs per node>}} "
                "in group_vars/compute.yml",
                host,
            )
        )
    else:
        model = gpu.get("model")
        profile = PROFILES.get(str(model).lower()) if model is not None else None
        if profile is None:
            findings.append(
                Finding(
                    "megahour_gpu.model",
                    f"unknown GPU model {model!r}",
                    f"use one of {', '.join(known_models())}, or add a profile in "
                    "python/megahour/inventory/profiles.py",
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
            findings.append(
                Finding(
                    "megahour_gpu.count",
                    f"{count} GPUs per node does not match the {profile.model} profile "
                    f"({', '.join(map(str, profile.counts_per_node))})",
                    f"set megahour_gpu.count to one of {', '.join(map(str, profile.counts_per_node))}",
                    host,
                )
            )

    fabric = hv.get("megahour_fabric")
    if not isinstance(fabric, dict) or fabric.get("type") not in FABRIC_TYPES:
        findings.append(
            Finding(
                "megahour_fabric.type",
                f"must be one of {', '.join(FABRIC_TYPES)} (got {fabric!r})",
                "set megahour_fabric: {type: infiniband, interface: ib0} (or roce/ethernet, or none "
                "for a single-node test box) in group_vars/compute.yml",
                host,
            )
        )
    elif fabric["type"] != "none" and not fabric.get("interface"):
        findings.append(
            Finding(
                "megahour_fabric.interface",
                f"a {fabric['type']} fabric needs its interface name",
                "set megahour_fabric.interface to the NIC NCCL should use (for example ib0 or ens8f0)",
                host,
            )
        )

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
    return findings


def _check_os(host: str, hv: dict[str, Any]) -> list[Finding]:
    os_name = hv.get("megahour_os")
    if os_name is not None and os_name not in SUPPORTED_OS:
        return [
            Finding(
                "megahour_os",
                f"unsupported operating system {os_name!r}",
                f"use one of {', '.join(SUPPORTED_OS)}",
                host,
            )
        ]
    return []
