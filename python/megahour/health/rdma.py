"""RDMA ports as the kernel shows them in sysfs, and whether each link is up at the rate the fabric needs.

Each port of each device is a directory ``/sys/class/infiniband/<device>/ports/<n>/`` whose files the
kernel's ``drivers/infiniband/core/sysfs.c`` writes as one line each:

- ``state``: ``<n>: <name>``, e.g. ``4: ACTIVE`` (DOWN, INIT, ARMED, ACTIVE, ACTIVE_DEFER);
- ``phys_state``: ``<n>: <name>``, e.g. ``5: LinkUp`` (Sleep, Polling, Disabled, LinkErrorRecovery, ...);
- ``rate``: ``<Gb/s>[.5] Gb/sec (<width>X <speed>)``, e.g. ``400 Gb/sec (4X NDR)``; kernels before HDR
  print no speed for SDR (``10 Gb/sec (4X)``); RoCE ports take IB speed names (``100 Gb/sec (4X EDR)``); a
  port with no cable may fail the read (EINVAL), and a down port reads a stale or minimum rate;
- ``link_layer``: ``InfiniBand``, ``Ethernet`` (RoCE) or ``Unknown``.

Parsing is apart from reading (:func:`read_ports`), and a file that does not read as the kernel writes it
is an unreadable port (UNKNOWN, which fails the gate closed), never a healthy one.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from megahour.health.verdict import Status, Verdict, passed

SYSFS_ROOT = Path("/sys/class/infiniband")
PORT_FILES = ("state", "phys_state", "rate", "link_layer")
LINK_LAYERS = ("InfiniBand", "Ethernet", "Unknown")
_NUMBERED = re.compile(r"^(?P<number>\d+): (?P<name>\S.*)$")
_RATE = re.compile(r"^(?P<gbps>\d+(?:\.\d+)?) Gb/sec(?: \((?P<width>\d+)X ?(?P<speed>[^)]*)\))?$")
CHECK = "rdma_links"


@dataclass(frozen=True)
class Port:
    device: str  # mlx5_0
    port: int
    state: str  # ACTIVE
    phys_state: str  # LinkUp
    rate_gbps: float | None  # None: the rate could not be read (a port without a cable)
    link_layer: str

    @property
    def name(self) -> str:
        return f"{self.device}/{self.port}"

    @property
    def up(self) -> bool:
        return self.state == "ACTIVE" and self.phys_state == "LinkUp"


@dataclass(frozen=True)
class RdmaRule:
    """What the inventory's megahour_fabric expects of the node's RDMA ports."""

    link_layer: str  # InfiniBand (type infiniband) or Ethernet (roce)
    devices: tuple[str, ...] = ()  # the HCAs NCCL is told to use; empty: every device found
    min_rate_gbps: float | None = None  # megahour_fabric.rate_gbps


class UnreadablePort(ValueError):
    pass


def _numbered(value: str, what: str) -> str:
    match = _NUMBERED.match(value.strip())
    if not match:
        raise UnreadablePort(f"{what} reads {value.strip()!r}, not '<number>: <name>'")
    return match["name"].strip()


def parse_rate(value: str) -> float:
    """``400 Gb/sec (4X NDR)`` -> 400.0; ``2.5 Gb/sec (1X SDR)`` -> 2.5."""
    match = _RATE.match(value.strip())
    if not match:
        raise UnreadablePort(f"rate reads {value.strip()!r}, not '<n> Gb/sec (<width>X <speed>)'")
    return float(match["gbps"])


def parse_port(device: str, port: int, files: Mapping[str, str]) -> Port:
    """One port from the text of its sysfs files; a missing or malformed file raises UnreadablePort.

    Only ``rate`` may be absent (its read fails on a port without a cable): such a port has no rate, and
    :func:`check` calls it down, or unreadable if the kernel says it is up.
    """
    missing = [name for name in PORT_FILES if name not in files and name != "rate"]
    if missing:
        raise UnreadablePort(f"{device}/{port}: no {', '.join(missing)} in sysfs")
    try:
        state = _numbered(files["state"], "state")
        phys_state = _numbered(files["phys_state"], "phys_state")
        link_layer = files["link_layer"].strip()
        if link_layer not in LINK_LAYERS:
            raise UnreadablePort(f"link_layer reads {link_layer!r}, not one of {', '.join(LINK_LAYERS)}")
        rate = parse_rate(files["rate"]) if "rate" in files else None
    except UnreadablePort as exc:
        raise UnreadablePort(f"{device}/{port}: {exc}") from None
    return Port(device, port, state, phys_state, rate, link_layer)


def read_ports(root: Path = SYSFS_ROOT) -> tuple[list[Port], list[str]]:
    """Every port under ``root``, and one message per port that could not be read."""
    ports: list[Port] = []
    errors: list[str] = []
    if not root.is_dir():
        return ports, errors
    for device_dir in sorted(root.iterdir()):
        ports_dir = device_dir / "ports"
        if not ports_dir.is_dir():
            errors.append(f"{device_dir.name}: no ports directory in sysfs")
            continue
        for port_dir in sorted(ports_dir.iterdir(), key=lambda p: (len(p.name), p.name)):
            if not port_dir.name.isdigit():
                continue
            files: dict[str, str] = {}
            for name in PORT_FILES:
                # A file that cannot be read is left out: parse_port says which (rate may be absent).
                with contextlib.suppress(OSError):
                    files[name] = (port_dir / name).read_text()
            try:
                ports.append(parse_port(device_dir.name, int(port_dir.name), files))
            except UnreadablePort as exc:
                errors.append(str(exc))
    return ports, errors


def _fail(reason: str, message: str, status: Status = Status.FAIL, **evidence) -> Verdict:
    return Verdict(CHECK, status, reason, message, evidence)


def _selected(ports: list[Port], rule: RdmaRule) -> tuple[list[Port], list[str]]:
    """The ports the rule names (``mlx5_0`` every port of it, ``mlx5_0:1`` one), and the names not found."""
    if not rule.devices:
        return list(ports), []
    chosen: list[Port] = []
    missing: list[str] = []
    for entry in rule.devices:
        device, _, number = entry.partition(":")
        found = [p for p in ports if p.device == device and (not number or str(p.port) == number)]
        if not found:
            missing.append(entry)
        chosen += [p for p in found if p not in chosen]
    return chosen, missing


def check(ports: list[Port], errors: list[str], rule: RdmaRule) -> Verdict:
    """Every expected port is of the fabric's link layer, up, at the fabric's rate or above.

    Unreadable sysfs is UNKNOWN (the gate fails closed); a named device that is absent, a port of the
    other link layer, a link that is not ACTIVE/LinkUp, or one slower than ``min_rate_gbps`` is a FAIL.
    """
    if errors:
        return _fail("rdma_unreadable", "; ".join(errors[:3]), Status.UNKNOWN)
    checked, missing = _selected(ports, rule)
    found = ", ".join(sorted({p.device for p in ports})) or "none"
    if missing or not checked:
        names = ", ".join(missing) or "no RDMA device"
        return _fail("rdma_device_missing", f"{names} not in sysfs (found: {found})", missing=missing)
    strangers = [p for p in checked if p.link_layer != rule.link_layer]
    if strangers:
        detail = ", ".join(f"{p.name} is {p.link_layer}" for p in strangers)
        return _fail(
            "rdma_link_layer_mismatch",
            f"{detail}; the fabric is {rule.link_layer}",
            ports=[p.name for p in strangers],
        )
    blind = [port.name for port in checked if port.up and port.rate_gbps is None]
    if blind:
        message = f"{', '.join(blind)}: up, but its rate cannot be read"
        return _fail("rdma_unreadable", message, Status.UNKNOWN)
    down = [port for port in checked if not port.up]
    if down:
        detail = ", ".join(f"{p.name} {p.state}/{p.phys_state}" for p in down)
        return _fail("rdma_link_down", f"link down: {detail}", ports=[p.name for p in down])
    if rule.min_rate_gbps is not None:
        slow = [p for p in checked if p.rate_gbps is not None and p.rate_gbps < rule.min_rate_gbps]
        if slow:
            detail = ", ".join(f"{p.name} {p.rate_gbps:g} Gb/s" for p in slow)
            return _fail(
                "rdma_rate_low",
                f"{detail}; the fabric runs at {rule.min_rate_gbps:g}",
                ports=[p.name for p in slow],
            )
    rates = sorted({p.rate_gbps for p in checked if p.rate_gbps is not None})
    return passed(
        CHECK,
        f"{len(checked)} {rule.link_layer} ports up at {', '.join(f'{r:g}' for r in rates)} Gb/s",
        ports=[p.name for p in checked],
    )
