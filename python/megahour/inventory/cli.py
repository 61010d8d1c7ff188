"""`megahour inventory validate`: the inventory contract, checked before any host is touched."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from megahour import cliutil

if TYPE_CHECKING:
    from rich.console import Console

# Not a usage error, but the same code as before: the inventory could not be read at all.
UNREADABLE_EXIT = 2


def register(subparsers: cliutil.Subparsers) -> None:
    inventory = cliutil.add_group(subparsers, "inventory", help="inventory contract")
    p = cliutil.add_command(
        inventory,
        "validate",
        _cmd_validate,
        help="check an inventory before deploying",
        exits={
            0: "the inventory is valid",
            1: "findings: each names the variable, the hosts and the fix",
            UNREADABLE_EXIT: "usage error, or the inventory cannot be read (missing, not parsable, no hosts, "
            "ansible-inventory not installed)",
        },
    )
    p.add_argument("-i", "--inventory", required=True, help="inventory directory or file")
    cliutil.add_json_flag(p)


def _cmd_validate(args: argparse.Namespace, console: Console) -> int:
    from megahour.inventory.source import InventoryError, load_snapshot
    from megahour.inventory.validate import render_grouped, validate

    try:
        findings = validate(load_snapshot(Path(args.inventory)))
    except InventoryError as exc:
        raise cliutil.CommandError(str(exc), UNREADABLE_EXIT) from None
    if args.json:
        cliutil.print_json({"ok": not findings, "findings": [f.to_dict() for f in findings]})
    elif findings:
        # Finding text quotes values and fixes such as [/dev/nvme0n1, ...]: never rich markup.
        for text in render_grouped(findings):
            console.print(cliutil.line(("✗", "red"), " ", text), highlight=False)
    else:
        console.print(cliutil.line(("✓", "green"), f" {args.inventory}: valid"), highlight=False)
    return 1 if findings else 0
