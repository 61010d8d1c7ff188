"""`megahour run`: the job-step wrapper Slurm jobs run their training step under."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from megahour import cliutil
from megahour.job_contract import CHECKPOINT_DIR_ENV

if TYPE_CHECKING:
    from rich.console import Console

USAGE_HINT = "megahour run -- python train.py"


def register(subparsers: cliutil.Subparsers) -> None:
    from megahour.run.policy import INTERRUPTED_EXIT, ExitContract
    from megahour.run.traces import DEFAULT_TRACE_ROOT, TRACE_ROOT_ENV

    contract = ExitContract()
    p = cliutil.add_command(
        subparsers,
        "run",
        _cmd_run,
        help="run a job step: restart in place on transient failures, requeue past budget",
        exits={
            0: "the step succeeded",
            2: "usage error: a bad option, or no command after --; nothing ran",
            contract.requeue_exit: "(--requeue-exit) transient failures past the restart budget, a transient "
            "failure on an unfit allocation (--requeue-if-unfit), or SIGTERM: Slurm requeues the job "
            "(slurm.conf RequeueExit)",
            contract.app_error_exit: "(--app-error-exit) the step failed with an application error "
            "(including a command that cannot start): no restart, no requeue",
            INTERRUPTED_EXIT: "interrupted (SIGINT, Ctrl-C): stopped, no requeue",
        },
    )
    p.add_argument(
        "--max-restarts",
        type=int,
        default=3,
        help="in-place restarts after transient failures before asking Slurm to requeue; "
        "the count resets whenever a new complete checkpoint lands",
    )
    p.add_argument(
        "--trace-root",
        help=f"where attempt diagnostics go (default ${TRACE_ROOT_ENV}, else {DEFAULT_TRACE_ROOT})",
    )
    p.add_argument(
        "--checkpoint-dir",
        help=f"directory of checkpoints, each complete one holding a .complete marker "
        f"(default ${CHECKPOINT_DIR_ENV}; unset: the restart budget never resets)",
    )
    p.add_argument(
        "--requeue-exit",
        type=int,
        default=contract.requeue_exit,
        help="exit code past the restart budget; must equal slurm.conf RequeueExit",
    )
    p.add_argument(
        "--app-error-exit",
        type=int,
        default=contract.app_error_exit,
        help="exit code for application errors; must not be in RequeueExit",
    )
    p.add_argument(
        "--requeue-if-unfit",
        action="store_true",
        help="before each restart in place, read the job's nodes from Slurm; when one is drained, down "
        "or not responding, exit for requeue instead (so Slurm restarts the job on healthy nodes); "
        "an unreadable node state counts as unfit",
    )
    # Named step_argv, not command: the top-level parser already stores the subcommand there.
    p.add_argument(
        "step_argv",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND ...",
        help="the training step to run, after --",
    )


def step_command(argv: list[str]) -> tuple[str, ...]:
    # REMAINDER keeps the "--" that separates our options from the step's.
    return tuple(argv[1:] if argv[:1] == ["--"] else argv)


def _cmd_run(args: argparse.Namespace, console: Console) -> int:
    from megahour.run import allocation, runner
    from megahour.run.policy import ExitContract, RetryBudget
    from megahour.run.progress import resolve_checkpoint_dir
    from megahour.run.traces import resolve_trace_root

    command = step_command(args.step_argv)
    if not command:
        print(f"megahour run: no command to run; put it after --, e.g. `{USAGE_HINT}`", file=sys.stderr)
        return 2
    try:
        contract = ExitContract(requeue_exit=args.requeue_exit, app_error_exit=args.app_error_exit)
        RetryBudget(args.max_restarts, contract)  # validates --max-restarts before anything runs
    except ValueError as exc:
        print(f"megahour run: {exc}", file=sys.stderr)
        return 2
    config = runner.RunConfig(
        command=command,
        trace_root=resolve_trace_root(args.trace_root, os.environ),
        checkpoint_dir=resolve_checkpoint_dir(args.checkpoint_dir, os.environ),
        max_restarts=args.max_restarts,
        contract=contract,
        allocation_check=(lambda: allocation.check(os.environ)) if args.requeue_if_unfit else None,
    )
    return runner.run(config)
