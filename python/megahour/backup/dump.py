"""Take a dump, list the dumps, prune old ones, restore one: the I/O around ``backup.plan``.

The dump tool's stdout is compressed as it streams into the atomic writer, so a dump of any size needs
no scratch space beyond the file itself, and the file appears under its final name only when the tool
exited 0 and wrote its closing comment. Dumps are 0600 (they hold password hashes and connections).
"""

from __future__ import annotations

import contextlib
import gzip
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from megahour.atomicio import atomic_writer
from megahour.backup.plan import (
    TAIL_BYTES,
    BackupError,
    Dump,
    Target,
    dump_command,
    file_name,
    is_complete,
    parse_file_name,
    rename_mariadb_database,
    restore_command,
    to_prune,
)
from megahour.metrics.textfile import Family, write

DUMP_MODE = 0o600
_CHUNK = 1 << 20
_STDERR_LIMIT = 4000

Runner = Callable[..., subprocess.Popen]


def list_dumps(directory: Path) -> list[Dump]:
    """Every published dump in ``directory``, oldest first (temporaries and other files are skipped)."""
    if not directory.is_dir():
        return []
    out = []
    for entry in directory.iterdir():
        parsed = parse_file_name(entry.name)
        if parsed and entry.is_file():
            out.append(Dump(parsed[0], parsed[1], entry, entry.stat().st_size))
    return sorted(out, key=lambda d: (d.taken, d.target))


def take(
    target: Target,
    directory: Path,
    *,
    now: datetime | None = None,
    popen: Runner = subprocess.Popen,
) -> Dump:
    """Dump ``target`` into ``directory``; the new file exists only if the dump is whole."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    taken = (now or datetime.now(UTC)).astimezone(UTC)
    path = directory / file_name(target.name, taken)
    argv = dump_command(target)
    tail = b""
    # The tool's messages go to a file, not a pipe: one that warns more than a pipe holds while this
    # process reads its stdout would block forever on a pipe nobody reads.
    with tempfile.TemporaryFile() as errors:
        try:
            proc = popen(argv, stdout=subprocess.PIPE, stderr=errors)
        except FileNotFoundError as exc:
            raise BackupError(
                f"backup {target.name}: {argv[0]} is not installed on this host; install the database's "
                "client tools or run the backup where the database runs"
            ) from exc
        assert proc.stdout is not None
        try:
            with atomic_writer(path, DUMP_MODE) as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as out:
                while chunk := proc.stdout.read(_CHUNK):
                    out.write(chunk)
                    tail = (tail + chunk)[-TAIL_BYTES:]
                rc = proc.wait()
                if rc != 0:
                    errors.seek(0)
                    detail = errors.read().decode(errors="replace").strip()[-_STDERR_LIMIT:] or "no message"
                    raise BackupError(f"backup {target.name}: {' '.join(argv)} exited {rc}: {detail}")
                if not is_complete(target.kind, tail):
                    raise BackupError(
                        f"backup {target.name}: the {target.kind} dump ended without its closing comment "
                        "(cut short); nothing was published, the previous dump stands: rerun it"
                    )
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return Dump(target.name, taken, path, path.stat().st_size)


def prune(directory: Path, keep: int) -> list[Dump]:
    """Delete the dumps beyond the newest ``keep`` per target; returns what was deleted."""
    doomed = to_prune(list_dumps(directory), keep)
    for dump in doomed:
        dump.path.unlink(missing_ok=True)
    return doomed


def restore(
    target: Target,
    dump: Path,
    *,
    database: str | None = None,
    socket: str | None = None,
    port: int | None = None,
    popen: Runner = subprocess.Popen,
) -> None:
    """Feed ``dump`` to the database's client, into ``database`` (the dump's own by default).

    PostgreSQL needs the database to exist and be empty (``createdb``); a MariaDB dump creates its own.
    """
    if not dump.is_file():
        raise BackupError(
            f"restore {target.name}: {dump} does not exist; list the dumps with `megahour backup list`"
        )
    argv = restore_command(target, database, socket=socket, port=port)
    rename = target.kind == "mariadb" and database and database != target.database
    # The client's messages go to a file, not a pipe: a client that writes much while reading a large dump
    # cannot block on a full pipe nobody reads.
    with tempfile.TemporaryFile() as errors:
        proc = popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=errors)
        assert proc.stdin is not None
        try:
            with gzip.open(dump, "rb") as source:
                for line in source:
                    proc.stdin.write(
                        rename_mariadb_database(line, target.database, database) if rename else line
                    )
        except BrokenPipeError:
            pass  # the client stopped reading: its exit status and message say why
        except (OSError, EOFError) as exc:
            proc.kill()
            proc.wait()
            raise BackupError(f"restore {target.name}: {dump} is not a readable gzip dump ({exc})") from exc
        finally:
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.close()
        rc = proc.wait()
        errors.seek(0)
        message = errors.read().decode(errors="replace").strip()[-_STDERR_LIMIT:]
    if rc != 0:
        raise BackupError(f"restore {target.name}: {' '.join(argv)} exited {rc}: {message or 'no message'}")


def write_metrics(directory: Path, target: Target, dump: Dump | None, seconds: float, ok: bool) -> Path:
    """``megahour_backup_*`` for node_exporter's textfile collector (one file per target)."""
    families = [
        Family("megahour_backup_last_run_ok", "1 when the last backup run published a whole dump").add(
            1 if ok else 0, target=target.name, kind=target.kind
        ),
        Family("megahour_backup_last_run_timestamp_seconds", "when the last backup run ended").add(
            time.time(), target=target.name, kind=target.kind
        ),
        Family("megahour_backup_duration_seconds", "how long the last backup run took").add(
            seconds, target=target.name, kind=target.kind
        ),
    ]
    if dump is not None:
        families.append(
            Family(
                "megahour_backup_last_success_timestamp_seconds", "when the newest whole dump was taken"
            ).add(dump.taken.timestamp(), target=target.name, kind=target.kind)
        )
        families.append(
            Family("megahour_backup_last_size_bytes", "the newest whole dump's compressed size").add(
                dump.size, target=target.name, kind=target.kind
            )
        )
    return write(directory, f"megahour_backup_{target.name}", families)


def clean_temporaries(directory: Path, names: Sequence[str], older_than_s: float = 86400) -> int:
    """Remove the temporaries of ``names``' dumps that a killed run left (``.<name>-….tmp`` older than
    ``older_than_s``: a younger one may be another run's, still writing). Returns how many went."""
    if not directory.is_dir():
        return 0
    cutoff = time.time() - older_than_s
    removed = 0
    for entry in directory.iterdir():
        ours = any(entry.name.startswith(f".{name}-") for name in names)
        if ours and entry.name.endswith(".tmp") and entry.stat().st_mtime < cutoff:
            entry.unlink(missing_ok=True)
            removed += 1
    return removed
