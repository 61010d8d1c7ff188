"""The alluxio role's derived values, as filters (vars/main.yml calls them), so each is pure and unit-tested.

- ``alluxio_dist_name``: the cached distribution's name, which changes with the version and the artifact list.
- ``alluxio_classpath``: the daemons' class path (the official tarball keeps the server jar in assembly/).
- ``alluxio_roles``: which daemons a host runs (master, worker, proxy, in start order).
- ``alluxio_block_bytes``: a block, one owned page range of the loader, in bytes.
- ``alluxio_ha_site``: the embedded-journal and RPC address lists of three or more masters.
- ``alluxio_worker_site``: a worker's page-store directories and sizes.
- ``alluxio_site_properties``: settings combined left to right, a key set to None dropped.
- ``alluxio_tree_digest``: a digest of a source tree (the S3 authenticator's), so its jar is built once each.
- ``alluxio_journal_members``: the master set a host's journal was formed with (tasks/journal_check.yml).
- ``alluxio_journal_mismatch``: the masters whose journal was formed with another master set.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
from collections.abc import Mapping, Sequence

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.text.formatters import human_to_bytes

# One master runs alone; three or more keep a Raft quorum when one fails. Two cannot (validate.yml).
HA_MASTERS = 3


def alluxio_dist_name(version: str, artifacts: Sequence[str], release_tarball: str = "") -> str:
    """``alluxio-<version>-<tarball file name>``, or ``alluxio-<version>-maven-<sha1 of the artifacts>``."""
    if release_tarball:
        return f"alluxio-{version}-{posixpath.basename(release_tarball)}"
    digest = hashlib.sha1(",".join(artifacts).encode()).hexdigest()[:10]
    return f"alluxio-{version}-maven-{digest}"


def alluxio_classpath(conf_dir: str, prefix: str, version: str, release_tarball: str = "") -> str:
    """The configuration directory, the jars of ``<prefix>/current``, then megahour's own (``<prefix>/ext``:
    the S3 authenticator), which Alluxio's jars never shadow."""
    current = f"{prefix}/current"
    if release_tarball:
        return f"{conf_dir}:{current}/assembly/alluxio-server-{version}.jar:{current}/lib/*:{prefix}/ext/*"
    return f"{conf_dir}:{current}/lib/*:{prefix}/ext/*"


def alluxio_tree_digest(path: str, skip: Sequence[str] = ("target",)) -> str:
    """The first 12 hex digits of a SHA-256 over every file below ``path`` (relative name and content, in
    name order), leaving out the folders named in ``skip`` (build output)."""
    if not os.path.isdir(path):
        raise AnsibleFilterError(f"{path} is not a directory (the S3 authenticator's sources)")
    digest = hashlib.sha256()
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if d not in skip)
        for name in sorted(files):
            full = os.path.join(root, name)
            digest.update(os.path.relpath(full, path).encode() + b"\0")
            with open(full, "rb") as handle:
                digest.update(hashlib.sha256(handle.read()).digest())
    return digest.hexdigest()[:12]


def alluxio_roles(
    host: str, masters: Sequence[str], workers: Sequence[str], proxies: Sequence[str]
) -> list[str]:
    """The daemons ``host`` runs, in the order they start."""
    groups = (("master", masters), ("worker", workers), ("proxy", proxies))
    return [role for role, hosts in groups if host in hosts]


def alluxio_block_bytes(page_size: str | int, pages_per_block: int | str) -> int:
    """``pages_per_block`` pages of ``page_size`` (``1MB`` is 1048576 bytes)."""
    try:
        return int(human_to_bytes(page_size, isbits=False)) * int(pages_per_block)
    except ValueError as exc:
        raise AnsibleFilterError(
            f"alluxio_page_size {page_size!r} or alluxio_pages_per_block: {exc}"
        ) from exc


def alluxio_ha_site(master_addresses: Sequence[str], ports: Mapping[str, int | str]) -> dict[str, str]:
    """With three or more masters, every master's embedded-journal and RPC address; else nothing."""
    if len(master_addresses) < HA_MASTERS:
        return {}
    return {
        "alluxio.master.embedded.journal.addresses": ",".join(
            f"{address}:{ports['master_raft']}" for address in master_addresses
        ),
        "alluxio.master.rpc.addresses": ",".join(
            f"{address}:{ports['master_rpc']}" for address in master_addresses
        ),
        # Only the leader serves its web port (Alluxio's default, pinned): `megahour cache status` takes the
        # first master that answers for the leader.
        "alluxio.standby.master.web.enabled": "false",
        # A new leader is elected within 3-6 s of the last one's silence instead of Alluxio's 10-20 s: a
        # master served again 9-16 s after a leader kill with these, 26-31 s with Alluxio's, against 14-16 s
        # for one master restarted by systemd (benchmarks/cache_failover.py, docs/benchmarks.md). A GC pause
        # past 3 s costs at most a needless election. alluxio_site_config overrides both.
        "alluxio.master.embedded.journal.election.timeout.min": "3s",
        "alluxio.master.embedded.journal.election.timeout.max": "6s",
    }


def alluxio_worker_site(page_dirs: Sequence[Mapping[str, str]], is_worker: bool = True) -> dict[str, str]:
    """A worker's page-store directories and their sizes, in the same order; nothing on other hosts."""
    if not is_worker:
        return {}
    return {
        "alluxio.worker.page.store.dirs": ",".join(str(d["path"]) for d in page_dirs),
        "alluxio.worker.page.store.sizes": ",".join(str(d["size"]) for d in page_dirs),
    }


def alluxio_site_properties(base: Mapping, *overrides: Mapping) -> dict:
    """``base`` updated by each of ``overrides`` in turn (not recursively), without keys set to None."""
    merged = dict(base)
    for override in overrides:
        merged.update(override)
    return {key: value for key, value in merged.items() if value is not None}


def alluxio_journal_members(marker: str | None, journal_entries: int | str, own_address: str) -> list[str]:
    """The master addresses a master's embedded journal was formed with: those its marker file names (one a
    line, as tasks/journal.yml writes it); without a marker, a journal that holds anything was formed by this
    master alone (every megahour release before the marker deployed one master); an empty or missing
    journal, none (a fresh master joins whatever set it is configured with)."""
    if marker is not None and marker.strip():
        return sorted({line.strip() for line in marker.splitlines() if line.strip()})
    if int(journal_entries) > 0:
        return [own_address]
    return []


def alluxio_journal_mismatch(
    recorded: Mapping[str, Sequence[str]], configured: Sequence[str]
) -> dict[str, list[str]]:
    """host -> the master set its journal records, for each master whose journal was formed with another set
    than ``configured`` (Raft keeps its members in the log: such a quorum cannot form). Empty when every
    journal agrees or is new."""
    want = sorted(set(configured))
    return {
        host: sorted(members)
        for host, members in sorted(recorded.items())
        if members and sorted(set(members)) != want
    }


class FilterModule:
    def filters(self):
        return {
            "alluxio_dist_name": alluxio_dist_name,
            "alluxio_classpath": alluxio_classpath,
            "alluxio_roles": alluxio_roles,
            "alluxio_block_bytes": alluxio_block_bytes,
            "alluxio_ha_site": alluxio_ha_site,
            "alluxio_worker_site": alluxio_worker_site,
            "alluxio_site_properties": alluxio_site_properties,
            "alluxio_tree_digest": alluxio_tree_digest,
            "alluxio_journal_members": alluxio_journal_members,
            "alluxio_journal_mismatch": alluxio_journal_mismatch,
        }
