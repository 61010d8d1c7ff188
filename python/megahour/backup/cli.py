"""`megahour backup run|list|restore`: dumps of the cluster's databases (the backup role's timers run
`megahour backup run`), and their restore (docs/resilience.md)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from megahour import cliutil

if TYPE_CHECKING:
    from rich.console import Console

    from megahour.backup.plan import Target

DEFAULT_DIR = "/srv/megahour/backups"
KIND_CHOICES = ("mariadb", "postgresql")


def errors() -> tuple[type[BaseException], ...]:
    from megahour.backup.plan import BackupError

    return (BackupError,)


def register(subparsers: cliutil.Subparsers) -> None:
    backup = cliutil.add_group(
        subparsers, "backup", help="dump the cluster's databases, list and restore the dumps", errors=errors
    )
    p = cliutil.add_command(
        backup,
        "run",
        _cmd_run,
        help="dump one database into DIR (published only when whole), then keep the newest --keep",
        exits={0: "a whole dump was published", 1: "the dump failed; the previous dumps stand"},
    )
    _target_args(p)
    p.add_argument("--keep", type=int, default=7, help="dumps to keep per target (the newest is always kept)")
    p.add_argument("--metrics", help="node_exporter textfile directory for megahour_backup_* (optional)")
    cliutil.add_json_flag(p)

    p = cliutil.add_command(
        backup,
        "list",
        _cmd_list,
        help="the published dumps in DIR, oldest first",
        exits={0: "listed (possibly none)"},
    )
    p.add_argument("--dir", default=DEFAULT_DIR, help="where the dumps are")
    p.add_argument("--name", help="only this target's dumps")
    cliutil.add_json_flag(p)

    p = cliutil.add_command(
        backup,
        "restore",
        _cmd_restore,
        help="load a dump (the target's newest by default) into a database server",
        exits={0: "restored", 1: "the dump is missing or unreadable, or the server refused it"},
    )
    _target_args(p)
    p.add_argument("--file", help="the dump to restore (default: the target's newest in --dir)")
    p.add_argument("--into", help="the database to restore into (default: the dump's own)")
    p.add_argument(
        "--socket",
        help="another server than this host's: MariaDB's socket file, or PostgreSQL's socket directory",
    )
    p.add_argument("--port", type=int, help="PostgreSQL's port on --socket")
    cliutil.add_json_flag(p)


def _target_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--name", required=True, help="the target's name (it names the dump files)")
    p.add_argument("--kind", required=True, choices=KIND_CHOICES, help="which database server")
    p.add_argument("--database", required=True, help="the database to dump (or that the dump holds)")
    p.add_argument(
        "--run-as", default="root", help="the account the dump tool runs as (postgres: peer authentication)"
    )
    p.add_argument("--dir", default=DEFAULT_DIR, help="where the dumps are")


def _target(args: argparse.Namespace) -> Target:
    from megahour.backup.plan import Target

    return Target(args.name, args.kind, args.database, args.run_as)


def _cmd_run(args: argparse.Namespace, console: Console) -> int:
    import time

    from megahour.backup import dump as dumps
    from megahour.backup.plan import newest

    target = _target(args)
    directory = Path(args.dir)
    started = time.monotonic()
    try:
        made = dumps.take(target, directory)
    except Exception:
        # Any failure (a refused login, a full or root-squashed disk) shows as last_run_ok 0.
        if args.metrics:
            previous = newest(dumps.list_dumps(directory), target.name)
            dumps.write_metrics(Path(args.metrics), target, previous, time.monotonic() - started, ok=False)
        raise
    pruned = dumps.prune(directory, args.keep)
    dumps.clean_temporaries(directory, [target.name])
    if args.metrics:
        dumps.write_metrics(Path(args.metrics), target, made, time.monotonic() - started, ok=True)
    result = {"dump": made.to_dict(), "pruned": [d.to_dict() for d in pruned]}
    text = f"dumped {target.database} ({target.kind}) to {made.path}, {made.size} bytes" + (
        f"; pruned {len(pruned)} older" if pruned else ""
    )
    cliutil.emit(args, console, result, text)
    return 0


def _cmd_list(args: argparse.Namespace, console: Console) -> int:
    from megahour.backup.dump import list_dumps

    found = [d for d in list_dumps(Path(args.dir)) if args.name in (None, d.target)]
    if args.json:
        cliutil.print_json([d.to_dict() for d in found])
        return 0
    if not found:
        console.print(f"no dumps in {args.dir}", markup=False, highlight=False)
        return 0
    rows = [(d.target, d.to_dict()["taken"], str(d.size), str(d.path)) for d in found]
    console.print(cliutil.table(("target", "taken", "bytes", "file"), rows))
    return 0


def _cmd_restore(args: argparse.Namespace, console: Console) -> int:
    from megahour.backup.dump import list_dumps, restore
    from megahour.backup.plan import BackupError, newest

    target = _target(args)
    if args.file:
        path = Path(args.file)
    else:
        latest = newest(list_dumps(Path(args.dir)), target.name)
        if latest is None:
            raise BackupError(
                f"restore {target.name}: no dump of it in {args.dir}; "
                "run `megahour backup run` first or pass --file"
            )
        path = latest.path
    restore(target, path, database=args.into, socket=args.socket, port=args.port)
    into = args.into or target.database
    cliutil.emit(args, console, {"restored": str(path), "into": into}, f"restored {path} into {into}")
    return 0
