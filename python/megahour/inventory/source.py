"""Build a validation snapshot from `ansible-inventory --list` (the CLI path)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

VAR_PREFIX = "megahour_"


class InventoryError(RuntimeError):
    pass


def snapshot_from_listing(listing: dict[str, Any]) -> dict[str, Any]:
    """Turn `ansible-inventory --list` JSON into a validation snapshot."""
    hostvars = listing.get("_meta", {}).get("hostvars", {})
    groups: dict[str, list[str]] = {}

    def hosts_of(group: str, seen: frozenset[str] = frozenset()) -> list[str]:
        entry = listing.get(group, {})
        found = list(entry.get("hosts", []))
        for child in entry.get("children", []):
            if child not in seen:
                found += hosts_of(child, seen | {group})
        return list(dict.fromkeys(found))

    for group in listing:
        if group != "_meta":
            groups[group] = hosts_of(group)
    hosts = {host: {k: v for k, v in hv.items() if k.startswith(VAR_PREFIX)} for host, hv in hostvars.items()}
    for host in groups.get("all", []):
        hosts.setdefault(host, {})
    return {"groups": groups, "hosts": hosts}


def load_snapshot(inventory: Path) -> dict[str, Any]:
    proc = subprocess.run(
        ["ansible-inventory", "-i", str(inventory), "--list"], capture_output=True, check=False, text=True
    )
    if proc.returncode != 0:
        raise InventoryError(f"ansible-inventory could not read {inventory}: {proc.stderr.strip()}")
    return snapshot_from_listing(json.loads(proc.stdout))
