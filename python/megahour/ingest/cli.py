"""`megahour ingest step|monolithic|plan|landing`: what the Airflow DAG's Slurm jobs run, and its baseline.

Airflow (the ingest extra) is never imported here: the steps run on nodes without it.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from megahour import cliutil

if TYPE_CHECKING:
    from rich.console import Console

# A failed summary step means the run failed (a critical step did): Airflow marks the run failed on it.
RUN_FAILED_EXIT = 3


def errors() -> tuple[type[BaseException], ...]:
    from megahour.curation.errors import CurationError
    from megahour.episodes.errors import EpisodeError
    from megahour.ingest.runfiles import RunDirError
    from megahour.objectstore.store import StoreError

    return (CurationError, ValueError, EpisodeError, RunDirError, StoreError)


def _config_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config", help="ingest settings (default $MEGAHOUR_INGEST_CONFIG, /etc/megahour/ingest.yml)"
    )


def register(subparsers: cliutil.Subparsers) -> None:
    from megahour.ingest.steps import STEPS

    ing = cliutil.add_group(
        subparsers,
        "ingest",
        help="ingestion: steps the Airflow DAG runs, the baseline, test data",
        errors=errors,
    )
    p = cliutil.add_command(
        ing,
        "step",
        _cmd_step,
        help="run one step of an ingestion run (what each Slurm job runs)",
        exits={
            0: "the step is done (its result is in the run folder)",
            1: "the step failed (Airflow retries it), or an error",
            RUN_FAILED_EXIT: "summary only: a critical step failed, so the run failed",
        },
    )
    p.add_argument(
        "step",
        choices=list(STEPS),
        metavar="STEP",
        help=f"the step: {', '.join(STEPS)}",
    )
    p.add_argument("--run-dir", required=True, help="the run's folder on the shared filesystem")
    p.add_argument("--batch", type=int, help="the batch, for per-batch steps")
    p.add_argument("--params", help="the run's params as JSON (discover only)")
    cliutil.add_json_flag(p)
    _config_arg(p)

    p = cliutil.add_command(
        ing,
        "monolithic",
        _cmd_monolithic,
        help="the single-process baseline: every step serially",
        exits={
            0: "the run succeeded",
            1: cliutil.FAILED,
            RUN_FAILED_EXIT: "the run failed (a step's message says which)",
        },
    )
    p.add_argument("--run-dir", required=True, help="the run's folder")
    p.add_argument("--params", help="run params as JSON (landing, storage, steps, ...)")
    cliutil.add_json_flag(p)
    _config_arg(p)

    p = cliutil.add_command(
        ing,
        "plan",
        _cmd_plan,
        help="bin-pack a landing zone and print the worker count and batches",
        exits={0: "planned", 1: cliutil.FAILED},
    )
    p.add_argument("--landing", help="default: the settings' landing zone")
    p.add_argument("--max-workers", type=int, help="at most this many workers (default: the settings' limit)")
    cliutil.add_json_flag(p)
    _config_arg(p)

    p = cliutil.add_command(
        ing,
        "landing",
        _cmd_landing,
        help="write simulated raw episodes (some corrupt) into a landing zone",
        exits={0: "the episodes are written", 1: cliutil.FAILED},
    )
    p.add_argument("dest", help="the landing zone folder to write into")
    p.add_argument("--count", type=int, default=20, help="raw episodes to write")
    p.add_argument(
        "--corrupt",
        type=int,
        default=0,
        help="how many of them get a damaged chunk (quarantined by ingestion)",
    )
    p.add_argument("--seconds", type=float, default=2.0, help="median episode length (lognormal spread)")
    p.add_argument("--seed", type=int, default=0, help="fixes the episodes")
    p.add_argument("--cameras", choices=["small", "default"], default="small", help="camera resolution set")
    cliutil.add_json_flag(p)


def _config(args: argparse.Namespace):
    from megahour.ingest.config import load_config

    return load_config(args.config)


def _params(text: str | None) -> dict | None:
    if text is None:
        return None
    try:
        params = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"--params is not JSON ({exc.msg}); pass an object such as '{{\"jitter_s\": 0}}'"
        ) from None
    if not isinstance(params, dict):
        raise ValueError("--params must be a JSON object")
    return params


def _log(console: Console):
    def log(text: str) -> None:
        console.print(text, highlight=False, markup=False)

    return log


def _cmd_step(args: argparse.Namespace, console: Console) -> int:
    from megahour.ingest import work

    try:
        result = work.execute(
            args.step, args.run_dir, args.batch, _params(args.params), _config(args), _log(console)
        )
    except work.StepFailed as exc:
        cliutil.print_error(str(exc), label="step failed:")
        return RUN_FAILED_EXIT if args.step == "summary" else 1
    if args.json:
        cliutil.print_json(result)
    return 0


def _cmd_landing(args: argparse.Namespace, console: Console) -> int:
    from dataclasses import asdict

    from megahour.ingest.landing import write_landing

    bar, update = cliutil.progress(console, "simulate raw episodes")
    with bar:
        landed = write_landing(
            args.dest, args.count, args.corrupt, args.seconds, args.seed, args.cameras, progress=update
        )
    result = {"dest": args.dest, "episodes": [asdict(e) for e in landed]}
    corrupt = sum(e.corrupt for e in landed)
    cliutil.emit(
        args, console, result, f"wrote {len(landed)} raw episodes ({corrupt} corrupt) to {args.dest}"
    )
    return 0


def _cmd_monolithic(args: argparse.Namespace, console: Console) -> int:
    from megahour.ingest import monolithic, work

    try:
        summary = monolithic.run_monolithic(args.run_dir, _params(args.params), _config(args), _log(console))
    except work.StepFailed as exc:
        cliutil.print_error(str(exc), label="run failed:")
        return RUN_FAILED_EXIT
    cliutil.emit(args, console, summary, f"{summary['registered']} episodes registered")
    return 0


def _cmd_plan(args: argparse.Namespace, console: Console) -> int:
    from megahour.ingest import binpack
    from megahour.ingest.config import MB
    from megahour.ingest.work import landing_files

    cfg = _config(args)
    found = landing_files(args.landing or cfg.landing)
    files = [info.url for info in found]
    sizes = [info.size for info in found]
    constraints = cfg.constraints(args.max_workers)
    chosen = binpack.plan(sizes, constraints)
    result = {**chosen.to_dict(), "files": [[str(files[i]) for i in b] for b in chosen.batches]}
    text = (
        f"{len(files)} files, {sum(sizes) / MB:.1f} MB: {chosen.workers} workers "
        f"(limited by {chosen.limited_by}), max/mean bytes {chosen.balance:.4f}"
    )
    cliutil.emit(args, console, result, text)
    return 0
