"""`megahour sweep`: resume healed nodes, delete stranded reservations, clear stale GPU allocations,
raise alerts (systemd timer)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from megahour import cliutil

if TYPE_CHECKING:
    from rich.console import Console

# sweep.rules.STALE_ALLOCATION_MODES, spelled out so that building the parser imports nothing more.
STALE_ALLOCATION_CHOICES = ("reconcile", "alert", "off")


def register(subparsers: cliutil.Subparsers) -> None:
    p = cliutil.add_command(
        subparsers,
        "sweep",
        _cmd_sweep,
        help="resume healed nodes, delete stranded reservations, clear stale GPU allocations, raise alerts",
        exits={
            0: "the sweep ran and every action it took succeeded",
            1: "it did nothing (history unreadable, a Slurm query failed) or an action failed",
        },
    )
    p.add_argument("--dry-run", action="store_true", help="plan only; change nothing")
    cliutil.add_json_flag(p)
    p.add_argument(
        "--history", default="/var/lib/megahour/sweep/history.json", help="past resumes (flapping)"
    )
    p.add_argument("--metrics", help="node_exporter textfile to write (…/megahour_sweep.prom)")
    p.add_argument("--dwell-seconds", type=int, default=600, help="minimum time drained before a resume")
    p.add_argument("--max-resumes", type=int, default=2, help="resumes per run (rate limit)")
    p.add_argument(
        "--drained-alert-seconds", type=int, default=3600, help="alert when drained+idle this long"
    )
    p.add_argument("--health-max-age-seconds", type=int, default=600, help="oldest health stamp trusted")
    p.add_argument(
        "--reservation-grace-seconds",
        type=int,
        default=1800,
        help="a megahour- reservation younger than this is in use, not stranded",
    )
    p.add_argument(
        "--stale-allocations",
        choices=STALE_ALLOCATION_CHOICES,
        default="reconcile",
        help="GPUs Slurm counts as allocated on a node that no job holds: reconcile (scontrol "
        "reconfigure, and alert while they stay), alert only, or off (not even queried)",
    )
    p.add_argument(
        "--stale-allocation-grace-seconds",
        type=int,
        default=120,
        help="a node must be seen stale in two sweeps at least this far apart before it counts",
    )
    p.add_argument(
        "--reconcile-cooldown-seconds",
        type=int,
        default=3600,
        help="at most one scontrol reconfigure for stale GPU allocations in this many seconds",
    )


def _cmd_sweep(args: argparse.Namespace, console: Console) -> int:
    from datetime import datetime, timedelta

    from megahour.slurm.client import SlurmClient
    from megahour.slurm.comment import stamps_from_show_node
    from megahour.sweep.freshness import fresh_status
    from megahour.sweep.rules import SweepPolicy
    from megahour.sweep.sweeper import run_sweep

    client = SlurmClient()
    policy = SweepPolicy(
        dwell=timedelta(seconds=args.dwell_seconds),
        max_resumes_per_run=args.max_resumes,
        drained_idle_alert_after=timedelta(seconds=args.drained_alert_seconds),
        reservation_grace=timedelta(seconds=args.reservation_grace_seconds),
        stale_allocations=args.stale_allocations,
        stale_allocation_grace=timedelta(seconds=args.stale_allocation_grace_seconds),
        reconcile_cooldown=timedelta(seconds=args.reconcile_cooldown_seconds),
    )
    cache: dict[str, dict] = {}

    def verdict_source(node: str) -> str | None:
        # One scontrol/sinfo pair per sweep, fetched only when a node is a candidate.
        if not cache:
            cache["stamps"] = stamps_from_show_node(client.show_nodes())
            cache["drained_at"] = {n.name: n.reason_time for n in client.nodes().items}
        return fresh_status(
            cache["stamps"].get(node),
            cache["drained_at"].get(node),
            datetime.now(),
            timedelta(seconds=args.health_max_age_seconds),
        )

    report = run_sweep(
        client,
        verdict_source,
        Path(args.history),
        Path(args.metrics) if args.metrics else None,
        policy,
        dry_run=args.dry_run,
    )
    if args.json:
        cliutil.print_json(report.to_dict())
    else:
        for text in report.describe():
            console.print(text, markup=False, highlight=False)
    return 0 if report.ok else 1
