"""`megahour train submit JOB.yml`: a job file rendered into one `sbatch` call of the training template.

A job file names what a lab changes between runs; everything else is the template's (docs/training.md):

    name: wam-tiny            # Slurm job name (default megahour-train)
    nodes: 2
    ranks_per_node: 2         # srun tasks a node, one per GPU (default: the template's)
    time: "02:00:00"          # Slurm time limit (default: the partition's)
    partition: gpu            # (default: Slurm's default partition)
    manifest: /srv/megahour/manifests/wam.arrow   # a built manifest: path or URL, fetched once a node
    env: {NCCL_DEBUG: WARN}   # exported to every rank
    sbatch: [--exclude=gpu-7] # more sbatch options, as given
    train:                    # `megahour train run` options by name (dashes or underscores)
      preset: tiny
      steps: 200
      checkpoint_every: 20

Nothing here runs a command: the CLI loads, renders, then hands the argv to the Slurm adapter.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from megahour.slurm.jobs import ScriptJob, script_sbatch_args

DEFAULT_TEMPLATE = Path("/opt/megahour/share/megahour-train.sbatch")
MANIFEST_ENV = "MEGAHOUR_TRAIN_MANIFEST"
# The template sets these itself, per job; a job file setting them would fight it.
TEMPLATE_OWNED = {
    "checkpoint-dir": "it is <runtime_train_root>/<job id>/checkpoints; leave it out",
    "log-dir": "it is <runtime_train_root>/<job id>/logs; leave it out",
    "manifest": "name the manifest in the top-level manifest: key (it is fetched once a node)",
    "json": "each rank's result is in <runtime_train_root>/<job id>/logs; leave it out",
}
_KEYS = frozenset(
    {"name", "nodes", "ranks_per_node", "time", "partition", "manifest", "env", "sbatch", "train"}
)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_JOB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class JobFileError(ValueError):
    """A job file that cannot be submitted; the message names the key and the fix."""


@dataclass(frozen=True)
class TrainJob:
    nodes: int
    name: str = "megahour-train"
    ranks_per_node: int | None = None
    time: str | None = None
    partition: str | None = None
    manifest: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    sbatch: tuple[str, ...] = ()
    train: Mapping[str, Any] = field(default_factory=dict)


def parse_job(data: object, source: str) -> TrainJob:
    """A job file's parsed YAML as a ``TrainJob``; every mistake is one ``JobFileError`` line."""
    if not isinstance(data, Mapping):
        raise JobFileError(f"{source}: expected a mapping of job settings (nodes:, train:, ...)")
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise JobFileError(f"{source}: unknown key {unknown[0]!r}; the keys are {', '.join(sorted(_KEYS))}")
    nodes = data.get("nodes")
    if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1:
        raise JobFileError(f"{source}: nodes must be a whole number of nodes, 1 or more (got {nodes!r})")
    ranks = data.get("ranks_per_node")
    if ranks is not None and (not isinstance(ranks, int) or isinstance(ranks, bool) or ranks < 1):
        raise JobFileError(f"{source}: ranks_per_node must be 1 or more (got {ranks!r})")
    name = str(data.get("name", "megahour-train"))
    if not _JOB_NAME.fullmatch(name):
        raise JobFileError(f"{source}: name {name!r} must be letters, digits, '.', '_' or '-'")
    env = data.get("env") or {}
    if not isinstance(env, Mapping):
        raise JobFileError(f"{source}: env must be a mapping NAME: value")
    for key, value in env.items():
        if not _ENV_NAME.fullmatch(str(key)):
            raise JobFileError(f"{source}: env name {key!r} is not a shell variable name")
        if "," in str(value) or "\n" in str(value):
            # sbatch --export splits on commas; a newline would end the variable.
            raise JobFileError(
                f"{source}: env {key}'s value may not hold a comma or newline; "
                "set it in the fabric environment file instead"
            )
    sbatch = data.get("sbatch") or []
    if not isinstance(sbatch, list) or not all(isinstance(a, str) and a.startswith("-") for a in sbatch):
        raise JobFileError(f"{source}: sbatch must be a list of sbatch options, each starting with '-'")
    train = data.get("train") or {}
    if not isinstance(train, Mapping):
        raise JobFileError(f"{source}: train must be a mapping of `megahour train run` options")
    manifest = data.get("manifest")
    if manifest is not None and (not isinstance(manifest, str) or not manifest or "," in manifest):
        raise JobFileError(f"{source}: manifest must be one path or URL without commas (got {manifest!r})")
    return TrainJob(
        nodes=nodes,
        name=name,
        ranks_per_node=ranks,
        time=None if data.get("time") is None else str(data["time"]),
        partition=None if data.get("partition") is None else str(data["partition"]),
        manifest=manifest,
        env={str(k): str(v) for k, v in env.items()},
        sbatch=tuple(sbatch),
        train=dict(train),
    )


def train_argv(options: Mapping[str, Any], run_parser: argparse.ArgumentParser, source: str) -> list[str]:
    """``train:`` as `megahour train run` arguments, checked by that command's own parser."""
    known = {
        opt[2:]: action
        for action in run_parser._actions  # argparse keeps no public list of a parser's options
        for opt in action.option_strings
        if opt.startswith("--")
    }
    argv: list[str] = []
    for key, value in options.items():
        flag = str(key).replace("_", "-")
        if flag in TEMPLATE_OWNED:
            raise JobFileError(f"{source}: train.{key} is the job template's: {TEMPLATE_OWNED[flag]}")
        action = known.get(flag)
        if action is None:
            raise JobFileError(
                f"{source}: train.{key} is not a `megahour train run` option; see `megahour train run --help`"
            )
        if action.nargs == 0:  # a switch
            if not isinstance(value, bool):
                raise JobFileError(f"{source}: train.{key} is a switch: true or false (got {value!r})")
            if value:
                argv.append(f"--{flag}")
            continue
        for item in value if isinstance(value, list) else [value]:
            argv += [f"--{flag}", str(item)]
    try:
        run_parser.parse_args(argv)
    except SystemExit:  # argparse has printed which value is wrong
        raise JobFileError(f"{source}: a train: value was refused by `megahour train run` (above)") from None
    return argv


def sbatch_argv(job: TrainJob, template: Path, run_args: Sequence[str]) -> list[str]:
    """The ``sbatch --parsable`` call that submits ``job`` with the training template."""
    exports = dict(job.env)
    if job.manifest is not None:
        exports[MANIFEST_ENV] = job.manifest
    return script_sbatch_args(
        ScriptJob(
            script=str(template),
            script_args=tuple(run_args),
            name=job.name,
            nodes=job.nodes,
            ntasks_per_node=job.ranks_per_node,
            time=job.time,
            partition=job.partition,
            export=exports,
            extra=job.sbatch,
        )
    )
