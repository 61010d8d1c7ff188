"""Arguments of `megahour train`; the top-level parser mounts them. Logic lives in the train modules."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from rich.console import Console

from megahour.job_contract import CHECKPOINT_DIR_ENV

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


def configure_parser(train: argparse._SubParsersAction) -> None:
    p = train.add_parser("run", help="train the world-action model (one process per rank; use torchrun)")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--batch-size", type=int, default=8, help="samples per rank per step")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--checkpoint-dir",
        help=f"a directory every node sees (default ${CHECKPOINT_DIR_ENV}); resumes from its newest "
        "complete checkpoint",
    )
    p.add_argument("--checkpoint-every", type=int, default=10)
    p.add_argument("--keep-checkpoints", type=int, default=2)
    p.add_argument("--log-dir", help="attempt-numbered metrics logs and result.json (rank 0)")
    p.add_argument("--strategy", default="auto", choices=["auto", "replicated", "world", "per_node"])
    p.add_argument("--manifest", help="a fetched manifest (default: synthetic clips)")
    p.add_argument("--no-deterministic", action="store_true", help="allow nondeterministic kernels, threads")
    p.add_argument("--json", action="store_true", help="print the result as JSON (rank 0)")
    p.set_defaults(func=_cmd_run)

    p = train.add_parser("select", help="which Muon strategy the cost model picks for a layout")
    p.add_argument("--nodes", type=int, required=True)
    p.add_argument("--gpus-per-node", type=int, required=True)
    p.add_argument("--shapes", choices=["model", "llama8b"], default="model", help="the Muon matrices")
    p.add_argument("--links", help="a LinkModel as JSON (keys of `megahour train select --json`)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_select)

    p = train.add_parser("selfcheck", help="every strategy against torch.optim.Muon on local gloo worlds")
    p.add_argument("--layouts", default="1x1,1x4,2x2,2x4,4x2", help="NODESxGPUS, comma-separated")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_selfcheck)


def _cmd_run(args: argparse.Namespace, console: Console) -> int:
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
        manifest=Path(args.manifest) if args.manifest else None,
        deterministic=not args.no_deterministic,
    )
    result = train(config)
    if os.environ.get("RANK", "0") == "0":
        if args.json:
            print(json.dumps(result.to_dict(), indent=2))
        else:
            console.print(
                f"trained {result.steps} steps (resumed from {result.resumed_from}), strategy "
                f"{result.strategy}, final loss {result.final_loss}, parameters {result.digest}",
                highlight=False,
            )
    return 0


def _cmd_select(args: argparse.Namespace, console: Console) -> int:
    from megahour.train.costmodel import DEFAULT_LINKS, LinkModel, select_strategy
    from megahour.train.model import HEADS, ModelConfig, WorldActionModel
    from megahour.train.muon import route_parameters
    from megahour.train.topology import Topology

    if args.shapes == "llama8b":
        shapes = _LLAMA8B * 32
    else:
        muon, _ = route_parameters(WorldActionModel(ModelConfig()), HEADS)
        shapes = [tuple(p.shape) for _, p in muon]
    links = DEFAULT_LINKS
    if args.links:
        links = LinkModel(**{**json.loads(Path(args.links).read_text()), "source": args.links})
    choice = select_strategy(Topology(args.nodes, args.gpus_per_node), shapes, links)
    if args.json:
        print(json.dumps(choice.to_dict(), indent=2))
    else:
        console.print(f"{choice.strategy.value}: {choice.reason}", highlight=False)
    return 0


def _cmd_selfcheck(args: argparse.Namespace, console: Console) -> int:
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
        print(json.dumps({"ok": ok, "layouts": report}, indent=2))
    return 0 if ok else 1
