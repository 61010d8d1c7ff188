"""The Ansible collections requirements.yml pins, checked against the ones ansible actually loads.

``make venv`` runs ``python -m megahour.deploy.collection_pins --install``: for each pinned collection it
finds the copy ansible would load (the first in ansible's search order: the ``collections_path`` entries
of ansible.cfg, then every ``ansible_collections`` directory on ``sys.path``, where the ``ansible``
package keeps the collections it bundles) and reads its version. Only collections that are missing or at
another version are installed, with ``ansible-galaxy collection install``, into the first
``collections_path`` entry (the project's .cache/collections), which is searched first. So a venv whose
``ansible`` package bundles the pinned versions needs no Galaxy server; plain ansible-core gets them from
Galaxy once.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

Runner = Callable[..., subprocess.CompletedProcess]


class PinError(ValueError):
    """requirements.yml does not pin a collection to one version."""


@dataclass(frozen=True)
class Loaded:
    """The copy of a collection ansible loads: its version, and its root (ansible_collections' parent)."""

    version: str
    root: Path


def read_pins(requirements: str | os.PathLike[str]) -> dict[str, str]:
    """``{name: version}`` from a requirements.yml whose every collection is pinned to one exact version."""
    data = yaml.safe_load(Path(requirements).read_text()) or {}
    pins = {}
    for entry in data.get("collections") or []:
        name, version = (
            (entry.get("name"), entry.get("version")) if isinstance(entry, dict) else (entry, None)
        )
        version = str(version or "")
        if not version or not version.replace(".", "").isdigit():
            raise PinError(
                f'{requirements}: pin {name} to one version, e.g. `version: "1.2.3"` (has {version!r})'
            )
        pins[str(name)] = version
    return pins


def search_roots(
    configured: Sequence[str], sys_path: Sequence[str], scan_sys_path: bool = True
) -> list[Path]:
    """Collection roots in ansible's order: collections_path, then sys.path entries with collections."""
    roots = [Path(p).parent if Path(p).name == "ansible_collections" else Path(p) for p in configured]
    if scan_sys_path:
        roots += [Path(p) for p in sys_path if p and (Path(p) / "ansible_collections").is_dir()]
    unique = []
    for root in roots:
        if root not in unique:
            unique.append(root)
    return unique


def version_at(collection_dir: Path) -> str | None:
    """The version of an installed collection (MANIFEST.json) or of a source checkout (galaxy.yml)."""
    manifest = collection_dir / "MANIFEST.json"
    if manifest.is_file():
        return str(json.loads(manifest.read_text())["collection_info"]["version"])
    galaxy = collection_dir / "galaxy.yml"
    if galaxy.is_file():
        return str(yaml.safe_load(galaxy.read_text())["version"])
    return None


def loaded(names: Sequence[str], roots: Sequence[Path]) -> dict[str, Loaded]:
    """For each collection name, the copy found first in ``roots`` (absent when none has it)."""
    found = {}
    for name in names:
        namespace, collection = name.split(".", 1)
        for root in roots:
            version = version_at(root / "ansible_collections" / namespace / collection)
            if version is not None:
                found[name] = Loaded(version, root)
                break
    return found


def mismatched(pins: dict[str, str], found: dict[str, Loaded]) -> list[str]:
    """The pinned names ansible would load at another version, or not at all."""
    return [name for name, version in pins.items() if name not in found or found[name].version != version]


def describe(pins: dict[str, str], found: dict[str, Loaded]) -> list[str]:
    lines = []
    for name, version in pins.items():
        have = found.get(name)
        if have is None:
            lines.append(f"{name} {version}: missing")
        elif have.version != version:
            lines.append(f"{name} {version}: ansible loads {have.version} from {have.root}")
        else:
            lines.append(f"{name} {version}: ok ({have.root})")
    return lines


def ansible_search() -> tuple[list[str], list[Path]]:
    """collections_path and the whole search order of the ansible beside this Python (ANSIBLE_CONFIG's)."""
    from ansible import constants

    configured = list(constants.COLLECTIONS_PATHS)
    return configured, search_roots(configured, sys.path, constants.COLLECTIONS_SCAN_SYS_PATH)


def install(names_versions: dict[str, str], target: Path, galaxy: str, run: Runner = subprocess.run) -> None:
    specs = [f"{name}:=={version}" for name, version in names_versions.items()]
    argv = [galaxy, "collection", "install", "--force", "-p", str(target), *specs]
    print("installing:", " ".join(argv), flush=True)
    if run(argv, check=False).returncode != 0:
        raise SystemExit(f"`{' '.join(argv)}` failed: Galaxy (or your galaxy server) must be reachable")


def main(argv: Sequence[str] | None = None, run: Runner = subprocess.run) -> int:
    parser = argparse.ArgumentParser(prog="python -m megahour.deploy.collection_pins", description=__doc__)
    parser.add_argument("--requirements", default="requirements.yml", help="the pins (default: %(default)s)")
    parser.add_argument("--install", action="store_true", help="install what is missing or different")
    parser.add_argument(
        "--galaxy",
        default=str(Path(sys.executable).parent / "ansible-galaxy"),
        help="the ansible-galaxy command (default: the one beside this Python)",
    )
    args = parser.parse_args(argv)
    pins = read_pins(args.requirements)
    configured, roots = ansible_search()
    found = loaded(list(pins), roots)
    wrong = mismatched(pins, found)
    if wrong and args.install:
        if not configured:
            raise SystemExit(
                "set collections_path in ansible.cfg: the pinned collections are installed there"
            )
        install({name: pins[name] for name in wrong}, Path(configured[0]), args.galaxy, run)
        found = loaded(list(pins), roots)
        wrong = mismatched(pins, found)
    for line in describe(pins, found):
        print(line)
    if wrong:
        print(
            f"{len(wrong)} collection(s) differ from {args.requirements}: {', '.join(wrong)}", file=sys.stderr
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
