"""The training runtime: the world-action model, Muon with topology-aware sharding, and the trainer.

The public API, for a lab's own ``torchrun`` script (``docs/training.md`` has a complete example):

- data: ``ManifestDataset`` (a rank's manifest slice, read through the cache), ``SyntheticDataset``,
  ``batch_loader`` (a ``DataLoader`` whose batches are a pure function of (seed, step, rank));
- the optimizer: ``ShardedMuon``, ``MuonHyper``, ``route_parameters``, with ``Comm`` and ``Topology``;
- checkpoints: ``CheckpointStore``, ``save_checkpoint``, ``load_checkpoint``;
- the model: ``WorldActionModel``, ``preset``.

Importing this package does not import torch (the CLI must answer ``--help`` without it); each name is
imported from its module on first use (the ``train`` extra installs torch).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ManifestDataset": ("megahour.train.data", "ManifestDataset"),
    "SyntheticDataset": ("megahour.train.data", "SyntheticDataset"),
    "batch_loader": ("megahour.train.data", "batch_loader"),
    "ShardedMuon": ("megahour.train.muon", "ShardedMuon"),
    "MuonHyper": ("megahour.train.muon", "MuonHyper"),
    "Strategy": ("megahour.train.muon", "Strategy"),
    "route_parameters": ("megahour.train.muon", "route_parameters"),
    "Comm": ("megahour.train.comm", "Comm"),
    "Topology": ("megahour.train.topology", "Topology"),
    "CheckpointStore": ("megahour.train.checkpoint", "CheckpointStore"),
    "save_checkpoint": ("megahour.train.checkpoint", "save"),
    "load_checkpoint": ("megahour.train.checkpoint", "load_latest"),
    "WorldActionModel": ("megahour.train.model", "WorldActionModel"),
    "preset": ("megahour.train.model", "preset"),
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    try:
        module, attribute = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'megahour.train' has no attribute {name!r}") from None
    return getattr(importlib.import_module(module), attribute)
