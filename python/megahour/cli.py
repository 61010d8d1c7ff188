"""The `megahour` command. Each area's commands live in its package's cli.py (``register``); this module
only assembles them, and ``cliutil.dispatch`` runs the one chosen."""

from __future__ import annotations

import importlib
import sys

from megahour import cliutil

# The packages whose cli.py registers commands, in the order `megahour --help` lists them.
AREAS = (
    "cluster",
    "deploy",
    "inventory",
    "doctor",
    "health",
    "run",
    "sweep",
    "exporters",
    "backup",
    "episodes",
    "robotlogs",
    "curation",
    "delivery",
    "ingest",
    "train",
)

DESCRIPTION = "Stand up, check and run a robot-learning training cluster, and curate and deliver its data."
EPILOG = """\
`megahour COMMAND --help` shows a command's options, their defaults and its exit codes.
Every command: exit 2 is a usage error; a bad input or a file that cannot be read
is one line on stderr (`error: ...`, exit 1 unless the command says otherwise);
with --json, stdout holds only the JSON, and a reader that closes it early
(| head) ends the command quietly."""


def build_parser() -> cliutil.Parser:
    parser = cliutil.Parser(prog="megahour", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("--version", action=cliutil.VersionAction)
    commands = parser.add_subparsers(
        dest="command",
        required=True,
        metavar="COMMAND",
        title="commands",
        help="`megahour COMMAND --help` lists its subcommands or options",
    )
    for area in AREAS:
        importlib.import_module(f"megahour.{area}.cli").register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit:
        cliutil.flush_stdout()  # --help or --version into a closed pipe: quiet, not a traceback at exit
        raise
    return cliutil.dispatch(args)


if __name__ == "__main__":
    sys.exit(main())
