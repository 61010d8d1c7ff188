"""megahour's releases: pyproject.toml's version, a ``v<version>`` git tag, and the commit each was cut from.

pyproject.toml records every release's commit (``[tool.megahour.releases]``), so a clone whose tags did
not travel still finds them; the tests check each record against its tag and its own pyproject.toml.
The upgrade test deploys the previous release's tree, extracted here with ``git archive``, then upgrades
the running cluster to the checkout (docs/upgrading.md)::

    python -m megahour.deploy.releases list [--json]
    python -m megahour.deploy.releases extract --previous --into .cache/releases [--json]

Exit codes: 0 done; 1 a release cannot be found or extracted (the message names the fix); 2 usage.
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from megahour import atomicio

# Written last into an extracted tree: a directory without it is a partial extraction, redone.
EXTRACTED_MARKER = ".megahour-release"


class ReleaseError(RuntimeError):
    """A release that cannot be named, found or extracted; the message names the fix."""


@dataclass(frozen=True)
class Release:
    version: str
    commit: str

    @property
    def tag(self) -> str:
        return f"v{self.version}"


def _version(text: str, where: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        raise ReleaseError(f"{where}: {text!r} is not a PEP 440 version; write it as 0.2.0") from None


def current_version(pyproject_text: str) -> str:
    """The version pyproject.toml names."""
    version = tomllib.loads(pyproject_text).get("project", {}).get("version")
    if not isinstance(version, str):
        raise ReleaseError('pyproject.toml has no [project] version; add version = "0.1.0"')
    _version(version, "pyproject.toml [project] version")
    return version


def recorded(pyproject_text: str) -> list[Release]:
    """The releases pyproject.toml records, oldest first."""
    table = tomllib.loads(pyproject_text).get("tool", {}).get("megahour", {}).get("releases", {})
    if not isinstance(table, dict):
        raise ReleaseError("pyproject.toml [tool.megahour.releases] must map versions to commits")
    releases = []
    for version, commit in table.items():
        where = f"pyproject.toml [tool.megahour.releases] {version!r}"
        _version(version, where)
        hex_digits = isinstance(commit, str) and all(c in "0123456789abcdef" for c in commit)
        if not hex_digits or len(commit) != 40:
            raise ReleaseError(f"{where}: the commit must be the full 40-hex id (git rev-parse v{version})")
        releases.append(Release(version, commit))
    return sorted(releases, key=lambda r: Version(r.version))


def previous(releases: Sequence[Release], current: str) -> Release:
    """The newest release older than ``current``: what the checkout upgrades from."""
    older = [r for r in releases if Version(r.version) < Version(current)]
    if not older:
        raise ReleaseError(
            f"no release older than {current} is recorded in pyproject.toml [tool.megahour.releases]; "
            "record the last one's version and commit there"
        )
    return older[-1]


def _git(repo: Path, *args: str) -> bytes:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=False)
    if proc.returncode != 0:
        raise ReleaseError(
            f"git {' '.join(args)} failed in {repo}: {proc.stderr.decode(errors='replace').strip()}"
        )
    return proc.stdout


def tag_commit(repo: Path, release: Release) -> str | None:
    """The commit the release's tag points at, or None when this clone has no such tag."""
    proc = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"refs/tags/{release.tag}^{{commit}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.stdout.strip() or None


def extract(repo: Path, release: Release, into: Path) -> Path:
    """The release's tree at ``into/<version>``, extracted once from its commit (``git archive``)."""
    target = into / release.version
    marker = target / EXTRACTED_MARKER
    if marker.is_file() and marker.read_text().strip() == release.commit:
        return target
    has_commit = subprocess.run(
        ["git", "-C", str(repo), "cat-file", "-e", f"{release.commit}^{{commit}}"], check=False
    )
    if has_commit.returncode != 0:
        raise ReleaseError(
            f"release {release.version}'s commit {release.commit[:12]} is not in {repo} (a shallow clone?): "
            "run `git fetch --unshallow --tags`"
        )
    archive = _git(repo, "archive", "--format=tar", release.commit)
    into.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{release.version}.", dir=into))
    try:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(staging, filter="data")
        atomicio.atomic_write_text(staging / EXTRACTED_MARKER, release.commit + "\n")
        if target.exists():
            shutil.rmtree(target)
        atomicio.publish(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def _print(payload: object, as_json: bool, text: str) -> None:
    print(json.dumps(payload, indent=2) if as_json else text)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m megahour.deploy.releases",
        description="megahour's recorded releases, and their source trees for the upgrade test.",
        epilog="Exit codes: 0 done; 1 a release cannot be found or extracted; 2 usage.",
    )
    parser.add_argument("--repo", type=Path, default=Path("."), help="megahour's checkout (default: .)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    listing = commands.add_parser("list", help="the recorded releases, the current version and each tag")
    listing.add_argument("--json", action="store_true", help="print JSON")
    extracting = commands.add_parser("extract", help="write the previous release's tree under --into")
    extracting.add_argument(
        "--previous", action="store_true", required=True, help="the newest release older than the checkout"
    )
    extracting.add_argument("--into", type=Path, required=True, help="where <version>/ is written")
    extracting.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    repo = args.repo.resolve()
    try:
        text = (repo / "pyproject.toml").read_text()
        current = current_version(text)
        releases = recorded(text)
        if args.command == "list":
            rows = [{**asdict(r), "tag": r.tag, "tag_commit": tag_commit(repo, r)} for r in releases]
            lines = [f"current {current}"]
            for row in rows:
                tagged = row["tag_commit"][:12] if row["tag_commit"] else "absent from this clone"
                lines.append(f"{row['version']} {row['commit'][:12]} tag {row['tag']}: {tagged}")
            _print({"current": current, "releases": rows}, args.json, "\n".join(lines))
            return 0
        release = previous(releases, current)
        path = extract(repo, release, args.into.resolve())
        _print(
            {"current": current, "version": release.version, "commit": release.commit, "path": str(path)},
            args.json,
            f"megahour {release.version} ({release.commit[:12]}) is at {path}",
        )
        return 0
    except (OSError, ReleaseError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
