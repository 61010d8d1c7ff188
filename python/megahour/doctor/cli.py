"""`megahour doctor -i INVENTORY`: what the deploy needs, read from every host (read-only)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from megahour import cliutil

if TYPE_CHECKING:
    from rich.console import Console

UNREADABLE_EXIT = 2


def register(subparsers: cliutil.Subparsers) -> None:
    p = cliutil.add_command(
        subparsers,
        "doctor",
        _cmd_doctor,
        help="check the hosts have what the deploy needs (read-only)",
        description=(
            "Connects to every host of the inventory's `cluster` group through Ansible, runs a read-only "
            "probe (no Python needed there) and reports per host: OS and Python, GPU count, model and "
            "driver against the GPU profile, the fabric interface, NVMe devices and cache directories, the "
            "shared filesystem, free disk, time sync and clock skew, and the megahour version deployed."
        ),
        exits={
            0: "every host has what the deploy needs (warnings may be printed)",
            1: "blockers: the first one is printed last, naming the host and the fix",
            UNREADABLE_EXIT: "usage error, the inventory cannot be read, or ansible could not run",
        },
    )
    p.add_argument("-i", "--inventory", required=True, help="inventory directory or file")
    p.add_argument(
        "--limit",
        metavar="PATTERN",
        help="only the hosts of the cluster group that match this Ansible host pattern",
    )
    p.add_argument(
        "--min-free-gib",
        type=float,
        default=None,
        help="free space the root filesystem needs, in GiB (default: 10)",
    )
    p.add_argument("--timeout", type=float, default=300.0, help="seconds the probe may take on all hosts")
    p.add_argument("-v", "--verbose", action="store_true", help="print every check, not only the problems")
    cliutil.add_json_flag(p)


def _cmd_doctor(args: argparse.Namespace, console: Console) -> int:
    from megahour.doctor.report import diagnose
    from megahour.doctor.transport import TransportError
    from megahour.inventory.source import InventoryError

    try:
        report = diagnose(
            Path(args.inventory),
            limit=args.limit,
            timeout_s=args.timeout,
            min_free_gib=args.min_free_gib,
            progress=None if args.json else lambda text: console.print(text, style="dim", highlight=False),
        )
    except (InventoryError, TransportError) as exc:
        raise cliutil.CommandError(str(exc), UNREADABLE_EXIT) from None
    if args.json:
        cliutil.print_json(report.to_dict())
        return 1 if report.blockers else 0
    marks = {"pass": ("✓", "green"), "warn": ("!", "yellow"), "skip": ("-", "dim"), "fail": ("✗", "red")}
    for host, checks in report.hosts.items():
        shown = [c for c in checks if args.verbose or c.status.value in ("warn", "fail")]
        if not shown:
            console.print(cliutil.line(("✓", "green"), f" {host}: every check passes"), highlight=False)
        for check in shown:
            console.print(cliutil.line(marks[check.status.value], " ", check.render()), highlight=False)
    first = report.first_blocker
    if first is None:
        console.print(cliutil.line(("✓", "green"), f" {len(report.hosts)} host(s) ready"), highlight=False)
        return 0
    console.print(
        cliutil.line(("✗", "red"), f" {len(report.blockers)} blocker(s); first: {first.render()}"),
        highlight=False,
    )
    return 1
