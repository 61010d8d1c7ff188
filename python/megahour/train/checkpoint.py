"""Checkpoints with ``torch.distributed.checkpoint``: only complete ones count, resume from the newest.

Layout: ``<root>/step-00000030/`` holds one DCP checkpoint. Every rank writes its part; after the save
(a collective) rank 0 writes the ``.complete`` marker inside it, atomically, last. A directory without
the marker is a save that died half-way: it is never loaded, and the next save of that step replaces it.
``megahour run`` reads the same marker (``run.progress``; the names are in ``job_contract``) to tell
progress from a crash loop.

What a checkpoint holds:

- ``model``: the parameters (identical on every rank under DDP, and DCP writes them once; under FSDP2
  each rank writes its shards);
- ``adamw``: the AdamW state, keyed by parameter name (``get_state_dict``);
- ``muon``: ``momentum.<i>`` for each Muon matrix ``i``, written by its owner. Keys are global, so a
  job may resume under another strategy or world size: each rank loads the buffers it now owns;
- ``progress``: the next step to run. The data order is a function of the step (``data``), so
  nothing else is needed to resume with the same batches.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from megahour.atomicio import atomic_write_text
from megahour.job_contract import COMPLETE_MARKER
from megahour.train.comm import Comm
from megahour.train.muon import ShardedMuon

_STEP_DIR = re.compile(r"step-([0-9]{8})")


@dataclass(frozen=True)
class CheckpointRef:
    step: int
    path: Path


class CheckpointStore:
    """The checkpoint directory of one training run."""

    def __init__(self, root: Path, keep: int = 2) -> None:
        if keep < 1:
            raise ValueError(f"keep must be at least 1 complete checkpoint, got {keep}")
        self.root = Path(root)
        self.keep = keep

    def path_for(self, step: int) -> Path:
        return self.root / f"step-{step:08d}"

    def complete(self) -> list[CheckpointRef]:
        """Complete checkpoints, oldest first."""
        if not self.root.is_dir():
            return []
        refs = []
        for entry in self.root.iterdir():
            match = _STEP_DIR.fullmatch(entry.name)
            if match and (entry / COMPLETE_MARKER).is_file():
                refs.append(CheckpointRef(int(match.group(1)), entry))
        return sorted(refs, key=lambda r: r.step)

    def latest(self) -> CheckpointRef | None:
        refs = self.complete()
        return refs[-1] if refs else None

    def prune(self) -> list[Path]:
        """Delete complete checkpoints beyond the newest ``keep``, and stale incomplete ones below them."""
        refs = self.complete()
        removed = [r.path for r in refs[: -self.keep]]
        newest_kept = refs[-self.keep].step if len(refs) >= self.keep else -1
        for entry in self.root.iterdir() if self.root.is_dir() else []:
            match = _STEP_DIR.fullmatch(entry.name)
            if match and int(match.group(1)) < newest_kept and not (entry / COMPLETE_MARKER).exists():
                removed.append(entry)
        for path in removed:
            _remove(path)
        return removed


def _remove(path: Path) -> None:
    """Delete a checkpoint directory, its marker first: a deletion cut short leaves an incomplete
    checkpoint (ignored), never a "complete" one with missing shards."""
    (path / COMPLETE_MARKER).unlink(missing_ok=True)
    shutil.rmtree(path, ignore_errors=True)


def _state(model: nn.Module, adamw: torch.optim.Optimizer, muon: ShardedMuon, step: int) -> dict[str, Any]:
    model_state, adamw_state = get_state_dict(model, optimizers=adamw)
    params = muon.flat_params()
    momentum = {}
    for i in muon.owned():
        state = muon.state[params[i]]
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = torch.zeros_like(params[i])
        momentum[f"momentum.{i}"] = state["momentum_buffer"]
    return {
        "model": model_state,
        "adamw": adamw_state,
        "muon": momentum,
        "progress": {"step": torch.tensor(step, dtype=torch.int64)},
    }


def save(
    store: CheckpointStore,
    step: int,
    model: nn.Module,
    adamw: torch.optim.Optimizer,
    muon: ShardedMuon,
    comm: Comm,
    meta: dict[str, Any] | None = None,
) -> Path:
    """Save a checkpoint of the state after ``step`` steps, mark it complete, prune old ones."""
    path = store.path_for(step)
    if comm.rank == 0 and path.exists():
        _remove(path)  # a save of this step that died half-way (no marker: never loaded)
    comm.barrier()
    dcp.save(_state(model, adamw, muon, step), checkpoint_id=str(path))
    comm.barrier()
    if comm.rank == 0:
        marker = {"step": step, "completed_at": time.time(), **(meta or {})}
        atomic_write_text(path / COMPLETE_MARKER, json.dumps(marker, sort_keys=True) + "\n")
        store.prune()
    comm.barrier()
    return path


def load_latest(
    store: CheckpointStore, model: nn.Module, adamw: torch.optim.Optimizer, muon: ShardedMuon, comm: Comm
) -> int | None:
    """Load the newest complete checkpoint, if any (a collective call); the step it holds, else None.

    Rank 0 decides which: on a shared filesystem with attribute caching, ranks listing the directory
    themselves could see different newest checkpoints and start at different steps.
    """
    latest = store.latest() if comm.rank == 0 else None
    step = comm.all_gather_object(latest.step if latest else None)[0]
    if step is None:
        return None
    return load(CheckpointRef(step, store.path_for(step)), model, adamw, muon)


def saved_meta(store: CheckpointStore, step: int) -> dict[str, Any]:
    """What ``save`` recorded beside a complete checkpoint (its marker's fields); {} when unreadable."""
    try:
        return json.loads((store.path_for(step) / COMPLETE_MARKER).read_text())
    except (OSError, ValueError):
        return {}


def load(ref: CheckpointRef, model: nn.Module, adamw: torch.optim.Optimizer, muon: ShardedMuon) -> int:
    """Load ``ref`` into the model and optimizers in place; returns the step to continue from."""
    state = _state(model, adamw, muon, 0)
    dcp.load(state, checkpoint_id=str(ref.path))
    set_state_dict(model, adamw, model_state_dict=state["model"], optim_state_dict=state["adamw"])
    params = muon.flat_params()
    for key, buf in state["muon"].items():
        muon.state[params[int(key.split(".", 1)[1])]]["momentum_buffer"] = buf
    return int(state["progress"]["step"])
