"""The training runtime: the world-action model, Muon with topology-aware sharding, and the trainer.

Modules: ``topology`` (nodes x ranks, link classes), ``comm`` (collectives with byte accounting),
``muon`` (Muon math, sharding strategies, parameter routing), ``costmodel`` (closed-form bytes per
strategy, the time model and the strategy selector), ``probe`` (link calibration at job start).

Importing this package does not import torch; its modules do (the ``train`` extra installs it).
"""
