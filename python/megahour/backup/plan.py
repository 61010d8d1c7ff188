"""What a database dump is, what it is called, how it is judged complete and which ones to keep (pure).

A dump is one gzip-compressed SQL file per run, named ``<target>-<UTC time>.sql.gz``, written by
``backup.dump`` through the atomic writer: a file with that name is always a whole dump. Each dump tool
ends a complete dump with its own closing comment (below); a dump without it (a tool killed mid-way, a
disk that filled) is refused and never published, so "the newest dump" is always one that restores.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

KINDS = ("mariadb", "postgresql")
SUFFIX = ".sql.gz"
_STAMP = "%Y%m%dT%H%M%SZ"
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
_FILE_RE = re.compile(r"^(?P<target>[a-z0-9][a-z0-9_-]{0,62})-(?P<stamp>\d{8}T\d{6}Z)\.sql\.gz$")
# The last comment each tool writes when, and only when, it dumped everything.
_COMPLETE = {
    # mysqldump / mariadb-dump: "-- Dump completed on 2026-12-06  2:30:01" (--dump-date, the default).
    "mariadb": re.compile(rb"^-- Dump completed(?: on .*)?$", re.MULTILINE),
    # pg_dump's plain format: "-- PostgreSQL database dump complete".
    "postgresql": re.compile(rb"^-- PostgreSQL database dump complete$", re.MULTILINE),
}
# How far from the end the closing comment may sit (pg_dump 17 adds a \unrestrict line after it).
TAIL_BYTES = 4096


class BackupError(Exception):
    """A dump or restore that cannot be done as asked; the message names the thing and the fix."""


@dataclass(frozen=True)
class Target:
    """One database to dump: ``name`` names its files, ``kind`` picks the tool."""

    name: str
    kind: str
    database: str
    # The account the tool runs as (peer or unix-socket authentication, no password on a command line).
    run_as: str = "root"

    def __post_init__(self) -> None:
        if not _NAME_RE.match(self.name):
            raise BackupError(
                f"backup target name {self.name!r} is not a lower-case name of letters, digits, - and _; "
                "rename it (it names the dump files)"
            )
        if self.kind not in KINDS:
            raise BackupError(
                f"backup target {self.name}: kind {self.kind!r} is not one of {', '.join(KINDS)}"
            )
        if not self.database:
            raise BackupError(f"backup target {self.name}: no database named; set its database")


@dataclass(frozen=True)
class Dump:
    """A published dump file."""

    target: str
    taken: datetime
    path: Path
    size: int = 0

    def to_dict(self) -> dict:
        return {
            "target": self.target,
            "taken": self.taken.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "path": str(self.path),
            "bytes": self.size,
        }


def dump_command(target: Target) -> list[str]:
    """The argv that writes ``target``'s database as SQL to stdout, consistent without stopping writers."""
    if target.kind == "mariadb":
        # --single-transaction: a consistent InnoDB snapshot without locking slurmdbd out; routines and
        # triggers travel too (slurmdbd creates procedures).
        tool = ["mariadb-dump", "--single-transaction", "--routines", "--triggers", "--databases"]
        argv = [*tool, target.database]
    else:
        # Plain SQL with CREATE/ALTER OWNER statements, restorable with psql into an empty database.
        argv = ["pg_dump", "--format=plain", "--no-password", f"--dbname={target.database}"]
    if target.run_as != "root":
        argv = ["runuser", "-u", target.run_as, "--", *argv]
    return argv


def restore_command(
    target: Target, database: str | None = None, *, socket: str | None = None, port: int | None = None
) -> list[str]:
    """The argv that reads a dump (on stdin, uncompressed) into ``database`` (the target's by default).

    ``socket``: another server than the host's own (a fresh instance): MariaDB's socket file, or
    PostgreSQL's socket directory (with ``port``). A MariaDB dump names its database itself
    (``--databases``: CREATE DATABASE and USE); restoring under another name rewrites those two lines
    (``rename_mariadb_database``).
    """
    name = database or target.database
    if target.kind == "mariadb":
        argv = ["mariadb", "--batch"]
        if socket:
            argv.append(f"--socket={socket}")
    else:
        argv = ["psql", "--no-password", "--quiet", "--set=ON_ERROR_STOP=1", f"--dbname={name}"]
        if socket:
            argv.append(f"--host={socket}")
        if port:
            argv.append(f"--port={port}")
    if target.run_as != "root":
        argv = ["runuser", "-u", target.run_as, "--", *argv]
    return argv


def file_name(target: str, taken: datetime) -> str:
    return f"{target}-{taken.astimezone(UTC).strftime(_STAMP)}{SUFFIX}"


def parse_file_name(name: str) -> tuple[str, datetime] | None:
    """``(target, taken)`` for a dump's file name; None for anything else (temporaries, strangers)."""
    match = _FILE_RE.match(name)
    if not match:
        return None
    taken = datetime.strptime(match["stamp"], _STAMP).replace(tzinfo=UTC)
    return match["target"], taken


def is_complete(kind: str, tail: bytes) -> bool:
    """Whether the last bytes of an uncompressed dump hold its tool's closing comment."""
    return bool(_COMPLETE[kind].search(tail[-TAIL_BYTES:]))


def to_prune(dumps: Iterable[Dump], keep: int) -> list[Dump]:
    """The dumps beyond the newest ``keep`` of each target, oldest first. ``keep`` is at least 1: the
    newest dump is never pruned, whatever the caller asks."""
    if keep < 1:
        raise BackupError(f"keep is {keep}; keep at least 1 dump (the newest is what a restore needs)")
    by_target: dict[str, list[Dump]] = {}
    for dump in dumps:
        by_target.setdefault(dump.target, []).append(dump)
    out: list[Dump] = []
    for items in by_target.values():
        items.sort(key=lambda d: d.taken, reverse=True)
        out.extend(items[keep:])
    return sorted(out, key=lambda d: (d.target, d.taken))


def newest(dumps: Sequence[Dump], target: str) -> Dump | None:
    mine = [d for d in dumps if d.target == target]
    return max(mine, key=lambda d: d.taken) if mine else None


def rename_mariadb_database(line: bytes, old: str, new: str) -> bytes:
    """One line of a ``--databases`` dump, with its CREATE DATABASE / USE aimed at ``new``."""
    quoted_old = f"`{old}`".encode()
    if line.startswith((b"CREATE DATABASE", b"USE ")) and quoted_old in line:
        return line.replace(quoted_old, f"`{new}`".encode(), 1)
    return line
