"""`megahour health check|prolog|epilog|healthcheck`: the GPU and host health gates."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from megahour import cliutil

if TYPE_CHECKING:
    from rich.console import Console

SUITES = ("prolog", "full", "epilog")
DEFAULT_CONFIG = "/etc/megahour/health.json"


def errors() -> tuple[type[BaseException], ...]:
    from megahour.health.config import ConfigError

    return (ConfigError,)


def register(subparsers: cliutil.Subparsers) -> None:
    health = cliutil.add_group(subparsers, "health", help="GPU and host health gates", errors=errors)
    p = cliutil.add_command(
        health,
        "check",
        _cmd_check,
        help="run a check suite here and print the verdicts",
        exits={0: "the gate passes (every verdict PASS or WARN)", 1: "a check failed, or the config is bad"},
    )
    p.add_argument(
        "--suite",
        choices=SUITES,
        default="full",
        help="which checks: the Prolog's fast ones, all, or all plus DCGM (the Epilog's)",
    )
    cliutil.add_json_flag(p)
    _config_arg(p)
    for hook, text, fail in (
        (
            "prolog",
            "Slurm Prolog: fast gate, no Slurm calls",
            "the gate failed: Slurm drains the node and requeues",
        ),
        (
            "epilog",
            "Slurm Epilog: full checks, DCGM and diagnostics after a job; drains with megahour:<reason>",
            "the gate failed and the node could not be drained with our reason",
        ),
        (
            "healthcheck",
            "Slurm HealthCheckProgram: full checks; drains with megahour:<reason>",
            "the gate failed (the node was drained)",
        ),
    ):
        p = cliutil.add_command(
            health,
            hook,
            _cmd_hook,
            help=text,
            exits={0: "the gate passes", 1: f"{fail}; any error fails closed with 1 too"},
        )
        p.set_defaults(hook=hook)
        if hook == "healthcheck":
            p.add_argument("--node", help="Slurm node name (default: short host name)")
        _config_arg(p)


def _config_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default=DEFAULT_CONFIG, help="health config (rendered by slurm_node)")


def _config(args: argparse.Namespace):
    from megahour.health.config import load

    return load(Path(args.config))


def _cmd_check(args: argparse.Namespace, console: Console) -> int:
    from megahour.health.suites import run_suite
    from megahour.health.verdict import gate_passes

    verdicts = run_suite(_config(args), args.suite)
    ok = gate_passes(verdicts)
    if args.json:
        cliutil.print_json({"passed": ok, "suite": args.suite, "verdicts": [v.to_dict() for v in verdicts]})
    else:
        for v in verdicts:
            color = {"PASS": "green", "WARN": "yellow"}.get(v.status.value, "red")
            console.print(
                cliutil.line((f"{v.status.value:7}", color), f" {v.check:16} {v.reason:28} {v.message}"),
                highlight=False,
            )
    return 0 if ok else 1


def _cmd_hook(args: argparse.Namespace, console: Console) -> int:
    """prolog/epilog/healthcheck as Slurm runs them. Any error fails closed (exit 1)."""
    import os

    from megahour.health import gate
    from megahour.health.config import ConfigError

    try:
        config = _config(args)
        if args.hook == "prolog":
            return gate.prolog(config, os.environ)
        from megahour.slurm.client import SlurmClient

        client = SlurmClient()

        def node_reason(node: str) -> str | None:
            return next((n.reason for n in client.nodes().items if n.name == node), None)

        if args.hook == "epilog":
            return gate.epilog(config, os.environ, client.drain, node_reason)
        return gate.healthcheck(config, client.drain, node_reason, node=args.node, publish=client.set_comment)
    except (ConfigError, RuntimeError) as exc:
        print(f"megahour health {args.hook}: {exc}", file=sys.stderr)
        return 1
