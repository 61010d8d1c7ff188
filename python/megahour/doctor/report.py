"""The doctor's run: read the inventory, probe the hosts, check each one. The I/O lives here and in
``transport``; ``facts`` and ``checks`` stay pure."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from megahour.doctor import checks, facts, transport
from megahour.inventory.source import load_snapshot
from megahour.inventory.validate import CLUSTER_GROUP, SNAPSHOT_EXTRA_VARS

# What the doctor reads besides what validation does.
DOCTOR_VARS = (*SNAPSHOT_EXTRA_VARS, "common_time_sync_enabled")


@dataclass
class Report:
    hosts: dict[str, list[checks.Check]] = field(default_factory=dict)

    @property
    def blockers(self) -> list[checks.Check]:
        return [c for host_checks in self.hosts.values() for c in host_checks if c.blocks]

    @property
    def first_blocker(self) -> checks.Check | None:
        blockers = self.blockers
        return blockers[0] if blockers else None

    def to_dict(self) -> dict[str, Any]:
        first = self.first_blocker
        return {
            "ok": first is None,
            "hosts": {host: [c.to_dict() for c in host_checks] for host, host_checks in self.hosts.items()},
            "blockers": [c.to_dict() for c in self.blockers],
            "first_blocker": first.to_dict() if first else None,
        }


def inventory_paths(expects: list[checks.HostExpect]) -> list[str]:
    """Every path some host's checks need to know exists (the probe's arguments, the same for all)."""
    paths: list[str] = []
    for e in expects:
        paths += [p.rstrip("/") for p in e.cache_dirs] + [e.shared_root.rstrip("/")]
    return list(dict.fromkeys(p for p in paths if p))


def diagnose(
    inventory: Path,
    *,
    limit: str | None = None,
    timeout_s: float = 300.0,
    min_free_gib: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> Report:
    snapshot = load_snapshot(inventory, extra_vars=DOCTOR_VARS)
    hosts = list(snapshot["groups"].get(CLUSTER_GROUP) or [])
    if not hosts:
        from megahour.inventory.source import InventoryError

        raise InventoryError(
            f"inventory {inventory} has no hosts in its '{CLUSTER_GROUP}' group; "
            "run megahour inventory validate -i and fix what it names"
        )
    expects = {h: checks.expect_from_snapshot(snapshot, h) for h in hosts}
    pattern = CLUSTER_GROUP if not limit else f"{CLUSTER_GROUP}:&{limit}"
    if progress:
        progress(f"probing {pattern} of {inventory} (read-only) ...")
    run = transport.run_probe(inventory, pattern, inventory_paths(list(expects.values())), timeout_s)
    options = {} if min_free_gib is None else {"min_free_gib": min_free_gib}
    report = Report()
    for host in hosts:
        if host in run.unreachable:
            report.hosts[host] = [checks.unreachable(host, run.unreachable[host])]
        elif host in run.outputs:
            report.hosts[host] = checks.check_host(
                expects[host], facts.parse(run.outputs[host]), run.window, **options
            )
    return report
