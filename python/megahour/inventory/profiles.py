"""GPU model profiles: what an inventory may declare and what health checks expect.

The key is the inventory value of ``megahour_gpu.model`` and also the Slurm GRES
type (``Gres=gpu:<model>:<count>``). ``product_name`` is what ``nvidia-smi``
prints in its ``name`` column.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuProfile:
    model: str
    product_name: str
    architecture: str
    counts_per_node: tuple[int, ...]  # node shapes this model is sold in


PROFILES: dict[str, GpuProfile] = {
    p.model: p
    for p in (
        GpuProfile("h100", "NVIDIA H100 80GB HBM3", "hopper", (1, 2, 4, 8)),
        GpuProfile("h200", "NVIDIA H200", "hopper", (1, 2, 4, 8)),
        GpuProfile("a100", "NVIDIA A100-SXM4-80GB", "ampere", (1, 2, 4, 8)),
        GpuProfile("l40s", "NVIDIA L40S", "ada", (1, 2, 4, 8)),
    )
}


def known_models() -> list[str]:
    return sorted(PROFILES)
