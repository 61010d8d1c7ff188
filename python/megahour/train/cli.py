"""`megahour train run|select|selfcheck`. torch (the train extra) is imported by the commands only."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from megahour import cliutil
from megahour.job_contract import CHECKPOINT_DIR_ENV, PEER_LOST_EXIT

if TYPE_CHECKING:
    from rich.console import Console

# The trainer's choices, spelled here so `megahour --help` needs no torch (tests/train/test_cli.py
# checks them against the trainer's, the model's, the data-parallel modes and the runtime's).
STRATEGIES = ("auto", "replicated", "world", "per_node", "fully_sharded")
PRESETS = ("tiny", "small", "base")
DATA_PARALLEL = ("ddp", "fsdp", "hsdp")
DEVICES = ("auto", "cpu", "cuda")
# A cluster sets it for every training job through the runtime role's runtime_train_env.
TEXTFILE_DIR_ENV = "MEGAHOUR_TRAIN_TEXTFILE_DIR"
# Where the sbatch template puts each job's run directory (the runtime role's runtime_train_root).
TRAIN_ROOT_ENV = "MEGAHOUR_TRAIN_ROOT"
DEFAULT_TRAIN_ROOT = "/srv/megahour/train"

# Shapes the selector can be asked about without building a model: the anchors' 8B example.
_LLAMA8B = [
    (4096, 4096),
    (4096, 4096),
    (1024, 4096),
    (1024, 4096),
    (14336, 4096),
    (14336, 4096),
    (4096, 14336),
]


FAILED = "an error (torch missing, bad layout or option): the message says which"
# The same words wherever torch is missing: the extra to install and, on a cluster, the switch to deploy.
NEEDS_TORCH = (
    "`megahour train` needs torch: install megahour's train extra (pip install 'megahour[train]'; "
    "on a cluster, deploy with runtime_train: true)"
)


def errors() -> tuple[type[BaseException], ...]:
    from megahour.slurm.client import SlurmQueryError
    from megahour.train.topology import TopologyError

    return (TopologyError, ValueError, SlurmQueryError)


def require_torch() -> None:
    """Name the missing extra before a deep ImportError does."""
    try:
        import torch  # noqa: F401
    except ImportError:
        raise cliutil.CommandError(NEEDS_TORCH) from None


def register(subparsers: cliutil.Subparsers) -> None:
    train = cliutil.add_group(
        subparsers, "train", help="the trainer, the Muon strategy selector and self-check", errors=errors
    )
    p = cliutil.add_command(
        train,
        "run",
        _cmd_run,
        help="train the world-action model (one process per rank; use torchrun)",
        exits={
            0: "trained every step",
            1: FAILED,
            PEER_LOST_EXIT: "another rank died (a collective or the store lost its peer): restart the step",
        },
    )
    add_run_arguments(p)
    cliutil.add_json_flag(p, help="print the result as JSON (rank 0)")

    p = cliutil.add_command(
        train,
        "select",
        _cmd_select,
        help="which Muon strategy the cost model picks for a layout",
        exits={0: "chosen", 1: FAILED},
    )
    p.add_argument("--nodes", type=int, required=True, help="nodes in the job")
    p.add_argument("--gpus-per-node", type=int, required=True, help="ranks per node")
    p.add_argument("--shapes", choices=["model", "llama8b"], default="model", help="the Muon matrices")
    p.add_argument("--links", help="a LinkModel as JSON (keys of `megahour train select --json`)")
    cliutil.add_json_flag(p)

    p = cliutil.add_command(
        train,
        "submit",
        _cmd_submit,
        help="render a job file into the training template's sbatch call and submit it",
        exits={
            0: "submitted (or, with --dry-run, rendered)",
            1: "a bad job file or sbatch refused it: " + FAILED,
        },
    )
    p.add_argument(
        "job_file", metavar="JOB.yml", help="the job: nodes, manifest, train options (docs/training.md)"
    )
    p.add_argument(
        "--template",
        help="the sbatch template the runtime role installed; empty: the runtime role's "
        "/opt/megahour/share/megahour-train.sbatch",
    )
    p.add_argument("--dry-run", action="store_true", help="print the sbatch call instead of running it")
    cliutil.add_json_flag(p)

    p = cliutil.add_command(
        train,
        "status",
        _cmd_status,
        help="where a training job stands, from its logs: attempts, step, loss, step time, data wait",
        exits={0: "the job's logs were read", 1: FAILED},
    )
    p.add_argument("job", help="the Slurm job id the sbatch template ran, or its run directory")
    p.add_argument(
        "--root",
        help=f"the training root (runtime_train_root); empty: ${TRAIN_ROOT_ENV}, else {DEFAULT_TRAIN_ROOT}",
    )
    cliutil.add_json_flag(p)

    p = cliutil.add_command(
        train,
        "selfcheck",
        _cmd_selfcheck,
        help="every strategy against torch.optim.Muon on local gloo worlds",
        exits={
            0: "every strategy is bit-exact, with identical replicas and the modelled bytes",
            1: "a mismatch, or " + FAILED,
        },
    )
    p.add_argument("--layouts", default="1x1,1x4,2x2,2x4,4x2", help="NODESxGPUS, comma-separated")
    p.add_argument("--steps", type=int, default=3, help="optimizer steps per layout")
    cliutil.add_json_flag(p)


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """`train run`'s options (without --json); `train submit` checks a job file's `train:` against them."""
    p.add_argument("--steps", type=int, default=50, help="optimizer steps to train in all (resumes count)")
    p.add_argument("--batch-size", type=int, default=8, help="samples per rank per step")
    p.add_argument("--seed", type=int, default=0, help="fixes the initial weights and the data order")
    p.add_argument(
        "--checkpoint-dir",
        help=f"a directory every node sees (default ${CHECKPOINT_DIR_ENV}); resumes from its newest "
        "complete checkpoint",
    )
    p.add_argument("--checkpoint-every", type=int, default=10, help="steps between checkpoints")
    p.add_argument("--keep-checkpoints", type=int, default=2, help="complete checkpoints kept")
    p.add_argument("--log-dir", help="attempt-numbered metrics logs and result.json (rank 0)")
    p.add_argument(
        "--strategy",
        default="auto",
        choices=list(STRATEGIES),
        help="Muon sharding; auto asks the calibrated selector among those the data-parallel mode runs",
    )
    p.add_argument(
        "--data-parallel",
        default="ddp",
        choices=list(DATA_PARALLEL),
        help="DistributedDataParallel, or FSDP2 sharded over the world (fsdp) or inside each node (hsdp)",
    )
    p.add_argument("--preset", default="tiny", choices=list(PRESETS), help="the model's size")
    p.add_argument("--device", default="auto", choices=list(DEVICES), help="auto: CUDA + NCCL where GPUs are")
    p.add_argument("--compile", action="store_true", help="torch.compile the transformer blocks")
    p.add_argument("--manifest", help="a fetched manifest (default: synthetic clips)")
    p.add_argument(
        "--cache-config",
        help="the node's cache.yml: read the manifest's episodes through the cache (default: "
        "/etc/megahour/cache.yml when it exists, else the under-store directly)",
    )
    p.add_argument("--camera", action="append", dest="cameras", help="a camera topic to train on (repeat)")
    p.add_argument("--workers", type=int, default=0, help="DataLoader processes decoding samples")
    p.add_argument(
        "--textfile-dir",
        help=f"the node exporter's textfile directory for step metrics; empty: ${TEXTFILE_DIR_ENV} "
        "(set it in runtime_train_env), else none",
    )
    p.add_argument("--job", default="", help="the job label of the textfile metrics; empty: $SLURM_JOB_ID")
    p.add_argument("--no-deterministic", action="store_true", help="allow nondeterministic kernels, threads")


def _cmd_run(args: argparse.Namespace, console: Console) -> int:
    require_torch()
    from megahour.train.failures import is_peer_lost
    from megahour.train.model import preset
    from megahour.train.trainer import TrainConfig, train

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    checkpoint_dir = args.checkpoint_dir or os.environ.get(CHECKPOINT_DIR_ENV)
    config = TrainConfig(
        steps=args.steps,
        batch_size=args.batch_size,
        seed=args.seed,
        checkpoint_dir=Path(checkpoint_dir) if checkpoint_dir else None,
        checkpoint_every=args.checkpoint_every,
        keep_checkpoints=args.keep_checkpoints,
        log_dir=Path(args.log_dir) if args.log_dir else None,
        strategy=args.strategy,
        data_parallel=args.data_parallel,
        device=args.device,
        compile=args.compile,
        manifest=Path(args.manifest) if args.manifest else None,
        cache_config=_cache_config(args.cache_config),
        cameras=tuple(args.cameras) if args.cameras else None,
        workers=args.workers,
        textfile_dir=_textfile_dir(args.textfile_dir),
        job=args.job or os.environ.get("SLURM_JOB_ID", ""),
        deterministic=not args.no_deterministic,
        model=preset(args.preset),
    )
    try:
        result = train(config)
    except Exception as exc:
        if not is_peer_lost(exc):
            raise
        # One line, not a traceback per rank: the rank that died has the story.
        first_line = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        print(
            f"megahour train run: rank {os.environ.get('RANK', '0')} lost a peer ({first_line}); "
            f"exiting {PEER_LOST_EXIT} so the step restarts",
            file=sys.stderr,
            flush=True,
        )
        return PEER_LOST_EXIT
    if os.environ.get("RANK", "0") == "0":
        if args.json:
            cliutil.print_json(result.to_dict())
        else:
            console.print(
                f"trained {result.steps} steps (resumed from {result.resumed_from}), strategy "
                f"{result.strategy}, final loss {result.final_loss}, parameters {result.digest}",
                highlight=False,
            )
    return 0


def _textfile_dir(given: str | None) -> Path | None:
    chosen = given or os.environ.get(TEXTFILE_DIR_ENV)
    return Path(chosen) if chosen else None


def _cache_config(given: str | None) -> Path | None:
    """The node's cache.yml when the cache tier is deployed there; None reads the under-store."""
    if given:
        return Path(given)
    from megahour.delivery.client import DEFAULT_CONFIG

    return DEFAULT_CONFIG if DEFAULT_CONFIG.is_file() else None


def _cmd_select(args: argparse.Namespace, console: Console) -> int:
    require_torch()
    from megahour.train.costmodel import DEFAULT_LINKS, LinkModel, select_strategy
    from megahour.train.model import HEADS, WorldActionModel, preset
    from megahour.train.muon import route_parameters
    from megahour.train.topology import Topology

    if args.shapes == "llama8b":
        shapes = _LLAMA8B * 32
    else:
        muon, _ = route_parameters(WorldActionModel(preset("tiny")), HEADS)
        shapes = [tuple(p.shape) for _, p in muon]
    links = DEFAULT_LINKS
    if args.links:
        links = LinkModel(**{**json.loads(Path(args.links).read_text()), "source": args.links})
    choice = select_strategy(Topology(args.nodes, args.gpus_per_node), shapes, links)
    if args.json:
        cliutil.print_json(choice.to_dict())
    else:
        console.print(f"{choice.strategy.value}: {choice.reason}", highlight=False)
    return 0


def _cmd_submit(args: argparse.Namespace, console: Console) -> int:
    import shlex

    import yaml

    from megahour.slurm.client import SlurmClient
    from megahour.train.submit import DEFAULT_TEMPLATE, parse_job, sbatch_argv, train_argv

    source = args.job_file
    try:
        data = yaml.safe_load(Path(source).read_text())
    except OSError as exc:
        raise cliutil.CommandError(f"cannot read the job file {source}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise cliutil.CommandError(f"{source} is not YAML: {str(exc).splitlines()[0]}") from None
    job = parse_job(data, source)
    template = Path(args.template) if args.template else DEFAULT_TEMPLATE
    if not args.dry_run and not template.is_file():
        raise cliutil.CommandError(
            f"no training template at {template}: deploy the runtime role here, or pass --template"
        )
    run_parser = argparse.ArgumentParser(prog="megahour train run", add_help=False)
    add_run_arguments(run_parser)
    argv = sbatch_argv(job, template, train_argv(job.train, run_parser, source))
    job_id = None if args.dry_run else SlurmClient(timeout=60).submit(argv)
    if args.json:
        cliutil.print_json({"job_id": job_id, "argv": argv})
    elif job_id is None:
        print(shlex.join(argv))
    else:
        console.print(f"submitted job {job_id}: megahour train status {job_id}", highlight=False)
    return 0


def _cmd_status(args: argparse.Namespace, console: Console) -> int:
    from megahour.train.status import read_status

    root = Path(args.root or os.environ.get(TRAIN_ROOT_ENV) or DEFAULT_TRAIN_ROOT)
    status = read_status(args.job, root)
    if args.json:
        cliutil.print_json(status.to_dict())
        return 0
    state = "finished" if status.finished else "not finished"
    console.print(
        f"job {status.job} ({status.run_dir}): {len(status.attempts)} attempt(s), {state}", highlight=False
    )
    rows = []
    for a in status.attempts:
        rows.append(
            [
                str(a.attempt),
                "-" if a.resumed_from is None else str(a.resumed_from),
                "-" if a.step is None else str(a.step),
                "-" if a.loss is None else f"{a.loss:.6f}",
                "-" if a.step_seconds_mean is None else f"{a.step_seconds_mean * 1e3:.1f}",
                "-" if a.data_wait_fraction is None else f"{100 * a.data_wait_fraction:.1f}%",
                a.ended or ("torn log" if a.torn_lines else "running or killed"),
            ]
        )
    console.print(
        cliutil.table(["attempt", "resumed from", "step", "loss", "ms/step", "data wait", "ended"], rows)
    )
    reads = status.reads
    if reads is not None:
        verdict = (
            "every step once"
            if reads.complete
            else f"{reads.missing_steps} step(s) missing, {reads.duplicate_items} item(s) trained twice"
        )
        console.print(
            f"reads: {reads.samples} samples over {reads.steps} steps on {reads.ranks} rank(s), {verdict}; "
            f"{reads.fallbacks} of {reads.pieces} pieces from the under-store past a down cache worker; "
            f"digest {reads.digest[:16]}",
            highlight=False,
        )
    return 0


def _cmd_selfcheck(args: argparse.Namespace, console: Console) -> int:
    require_torch()
    from megahour.train.selfcheck import equivalence_worker
    from megahour.train.spawn import run_local_world
    from megahour.train.topology import Topology

    report: dict[str, dict] = {}
    ok = True
    for layout in args.layouts.split(","):
        try:
            nodes, gpus = (int(x) for x in layout.lower().split("x"))
        except ValueError:
            raise ValueError(f"layout {layout!r} is not NODESxGPUS, e.g. 2x4") from None
        ranks = run_local_world(Topology(nodes, gpus), equivalence_worker, steps=args.steps)
        for strategy in ranks[0]:
            exact = all(r[strategy]["params_equal"] and r[strategy]["momentum_equal"] for r in ranks)
            same = len({r[strategy]["digest"] for r in ranks}) == 1
            counted = ranks[0][strategy]["muon_bytes"] == ranks[0][strategy]["expected_muon_bytes"]
            ok = ok and exact and same and counted
            report.setdefault(layout, {})[strategy] = {
                "bit_exact": exact,
                "replicas_identical": same,
                "bytes_match_model": counted,
                "muon_bytes": ranks[0][strategy]["muon_bytes"],
            }
            if not args.json:
                console.print(
                    f"{layout:>5} {strategy:<10} exact={exact} replicas={same} bytes={counted} "
                    f"inter={ranks[0][strategy]['muon_bytes']['inter']}",
                    highlight=False,
                )
    if args.json:
        cliutil.print_json({"ok": ok, "layouts": report})
    return 0 if ok else 1
