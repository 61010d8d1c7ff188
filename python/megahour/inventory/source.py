"""Build a validation snapshot from `ansible-inventory --list` (the CLI path).

Every way of not getting a snapshot is an ``InventoryError`` whose text is one line naming the problem and
the fix: a path that does not exist, a directory without an inventory file, a file that does not parse
(``ansible-inventory`` only warns about that unless told otherwise, and then lists just localhost), an
inventory without hosts, and ``ansible-inventory`` itself missing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from megahour.inventory.validate import SNAPSHOT_EXTRA_VARS

VAR_PREFIX = "megahour_"
TOOL = "ansible-inventory"
EXAMPLE = "inventories/example-baremetal-h100"
# Without these, a source no plugin can parse is a warning and the listing holds only localhost.
STRICT_ENV = {"ANSIBLE_INVENTORY_UNPARSED_FAILED": "True", "ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED": "True"}
# Directories of an inventory directory that hold variables, not hosts.
VARS_DIRS = ("group_vars", "host_vars")
_YAML_SUFFIXES = (".yml", ".yaml")


class InventoryError(RuntimeError):
    pass


def snapshot_from_listing(
    listing: dict[str, Any], extra_vars: tuple[str, ...] = SNAPSHOT_EXTRA_VARS
) -> dict[str, Any]:
    """Turn `ansible-inventory --list` JSON into a validation snapshot: the groups, and each host's
    ``megahour_*`` variables plus ``extra_vars``."""
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
    hosts = {
        host: {k: v for k, v in hv.items() if k.startswith(VAR_PREFIX) or k in extra_vars}
        for host, hv in hostvars.items()
    }
    for host in groups.get("all", []):
        hosts.setdefault(host, {})
    return {"groups": groups, "hosts": hosts}


def find_tool(name: str = TOOL) -> str:
    """``name`` beside the running interpreter (the venv megahour runs from, activated or not), else on
    PATH."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise InventoryError(
            f"{name} is not installed beside {sys.executable} nor on PATH; install Ansible: `make venv` "
            "in the megahour checkout, or `pip install ansible-core` into this environment"
        )
    return found


def _inventory_files(directory: Path) -> list[Path]:
    return [p for p in sorted(directory.iterdir()) if not p.name.startswith(".") and p.name not in VARS_DIRS]


def _yaml_files(inventory: Path) -> list[Path]:
    if inventory.is_file():
        return [inventory]
    found = [p for p in _inventory_files(inventory) if p.is_file() and p.suffix in _YAML_SUFFIXES]
    for sub in VARS_DIRS:
        if (inventory / sub).is_dir():
            found += sorted(
                p for p in (inventory / sub).rglob("*") if p.is_file() and p.suffix in _YAML_SUFFIXES
            )
    return found


def _yaml_error(inventory: Path) -> tuple[str, str] | None:
    """(``FILE:LINE:COLUMN``, reason) for the first file of the inventory PyYAML cannot parse, if any."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    # Ansible's own tags (!vault, !unsafe) are not what is wrong.
    Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    for path in _yaml_files(inventory):
        try:
            yaml.load(path.read_text(errors="replace"), Loader=Loader)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
            return where, getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return None


_ORIGIN = re.compile(r"^Origin: (\S+?:\d+:\d+)\s*$", re.MULTILINE)


def explain_failure(inventory: Path, stderr: str) -> str:
    """One line for a failed ``ansible-inventory`` run, from its stderr."""
    yaml_reason = re.search(r"YAML parsing failed: (.+)", stderr)
    if yaml_reason is not None:
        reason = yaml_reason[1].strip().rstrip(".")
        origin = _ORIGIN.search(stderr)
        # Ansible names the file for a hosts file, not for group_vars: find it ourselves then.
        where, reason = (
            (origin[1], reason) if origin else (_yaml_error(inventory) or (str(inventory), reason))
        )
        return f"{where} is not valid YAML ({reason}); fix the syntax there (compare {EXAMPLE})"
    errors = [m.strip() for m in re.findall(r"\[ERROR\]: (.+)", stderr)]
    causes = [m.strip() for m in re.findall(r"<<< caused by >>>\s*\n\s*(.+)", stderr)]
    reason = "; ".join(dict.fromkeys(errors[:1] + causes[-1:])) or " ".join(stderr.split()) or "no output"
    return f"{TOOL} cannot read {inventory}: {reason}; compare it with {EXAMPLE}"


def load_snapshot(inventory: Path, extra_vars: tuple[str, ...] = SNAPSHOT_EXTRA_VARS) -> dict[str, Any]:
    inventory = Path(inventory)
    if not inventory.exists():
        raise InventoryError(
            f"inventory {inventory} does not exist; pass an inventory directory or hosts file, "
            f"e.g. -i {EXAMPLE}"
        )
    if inventory.is_dir() and not _inventory_files(inventory):
        raise InventoryError(
            f"inventory {inventory} has no hosts file; add one listing the controller and compute hosts "
            f"(copy {EXAMPLE}/hosts.yml)"
        )
    proc = subprocess.run(
        [find_tool(), "-i", str(inventory), "--list"],
        capture_output=True,
        check=False,
        text=True,
        env={**os.environ, **STRICT_ENV},
    )
    if proc.returncode != 0:
        raise InventoryError(explain_failure(inventory, proc.stderr))
    try:
        snapshot = snapshot_from_listing(json.loads(proc.stdout), extra_vars)
    except json.JSONDecodeError as exc:
        raise InventoryError(
            f"{TOOL} printed no JSON listing for {inventory} ({exc.msg}); run it by hand"
        ) from None
    if not snapshot["hosts"]:
        raise InventoryError(
            f"inventory {inventory} is empty: it declares no hosts; list the controller and compute hosts "
            f"in it (copy {EXAMPLE}/hosts.yml)"
        )
    return snapshot
