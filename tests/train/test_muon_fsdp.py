"""The three sharded strategies on real gloo worlds, with param groups, against ``torch.optim.Muon``.

One local world per layout (spawned processes). Every rank steps, with the same gradients on every
rank (as after the trainer's all-reduce or FSDP2's reduce-scatter): ``world`` and ``per_node`` on whole
tensors; ``fully_sharded`` on DTensors sharded over the world (a 1-D mesh) and over each node (an HSDP
``("inter", "intra")`` mesh); and, in one layout, a model sharded by ``fully_shard`` itself. The
matrices mix tall, wide and square shapes with row counts divisible by no shard size here (one has
fewer rows than ranks, so some shards are empty), in two param groups with different lr.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from megahour.train.comm import Comm, LinkBytes
from megahour.train.costmodel import fully_sharded_bytes, muon_bytes
from megahour.train.muon import MuonHyper, ShardedMuon, Strategy, shard_rows
from megahour.train.spawn import run_local_world
from megahour.train.topology import Topology

SHAPES = ((64, 32), (32, 64), (48, 48), (16, 80), (80, 16), (7, 20), (3, 50), (13, 9))
HYPER = MuonHyper(lr=0.02, weight_decay=0.01)
GROUP_LR = (0.02, 0.05)  # the first five matrices, then the rest
STEPS = 3


def _split(items: list[Any]) -> list[dict[str, Any]]:
    return [{"params": items[:5], "lr": GROUP_LR[0]}, {"params": items[5:], "lr": GROUP_LR[1]}]


def _tensors(seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=gen) for s in SHAPES]


def _run(params: list[torch.Tensor], full: list[torch.Tensor], make_grad: Any, optimizer: ShardedMuon) -> Any:
    """Step ``optimizer`` on ``params`` and torch's Muon on ``full`` with the same gradients."""
    reference = HYPER.reference(_split(full))
    for step in range(STEPS):
        for p, q, g in zip(params, full, _tensors(100 + step), strict=True):
            p.grad, q.grad = make_grad(g), g.clone()
        optimizer.step()
        reference.step()
    return reference


def _strategy_worker(rank: int, topology: Topology) -> dict[str, Any]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    n, g = topology.nodes, topology.gpus_per_node
    hsdp = init_device_mesh("cpu", (n, g), mesh_dim_names=("inter", "intra"))
    flat = init_device_mesh("cpu", (topology.world_size,), mesh_dim_names=("shard",))
    comm = Comm(topology, rank, node_group=hsdp["intra"].get_group())
    report: dict[str, Any] = {}
    layouts = {
        "world": None,
        "per_node": None,
        "fully_sharded_world": (flat, [Shard(0)], None),
        "fully_sharded_hsdp": (hsdp, [Replicate(), Shard(0)], g),
    }
    for name, mesh in layouts.items():
        comm.ledger.reset()
        full = _tensors(0)
        if mesh is None:
            params = [t.clone() for t in full]
            strategy = Strategy(name)

            def make_grad(t: torch.Tensor) -> torch.Tensor:
                return t.clone()
        else:
            device_mesh, placements, shard_size = mesh
            strategy = Strategy.FULLY_SHARDED

            def make_grad(t: torch.Tensor, m=device_mesh, pl=placements) -> torch.Tensor:
                return distribute_tensor(t.clone(), m, pl, src_data_rank=None)  # local slice, no comm

            params = [torch.nn.Parameter(make_grad(t)) for t in full]
        optimizer = ShardedMuon(_split(params), strategy=strategy, comm=comm, hyper=HYPER)
        reference = _run(params, full, make_grad, optimizer)
        ref_params = [q for group in reference.param_groups for q in group["params"]]
        owned = optimizer.owned()
        whole = [p.full_tensor() if mesh is not None else p for p in params]
        momentum = {
            i: optimizer.state[params[i]]["momentum_buffer"] for i in owned
        }  # DTensors under fully_sharded
        entry = {
            "params_equal": all(torch.equal(p, q) for p, q in zip(whole, ref_params, strict=True)),
            "momentum_equal": all(
                torch.equal(
                    m.full_tensor() if mesh is not None else m,
                    reference.state[ref_params[i]]["momentum_buffer"],
                )
                for i, m in momentum.items()
            ),
            "owned": owned,
            "muon_bytes": comm.job_totals().get("muon", LinkBytes()).to_dict(),
        }
        if mesh is not None:
            members = device_mesh.size(len(placements) - 1)
            index = device_mesh.get_local_rank(len(placements) - 1)
            entry["shard_rows_match"] = all(
                p.to_local().shape[0] == shard_rows(p.shape[0], members, index) for p in params
            )
            entry["momentum_is_dtensor_like_param"] = all(
                m.placements == params[i].placements and m.to_local().shape == params[i].to_local().shape
                for i, m in momentum.items()
            )
            entry["expected_muon_bytes"] = {
                k: v * STEPS for k, v in fully_sharded_bytes(topology, SHAPES, shard_size).to_dict().items()
            }
        else:
            expected = muon_bytes(strategy, topology, SHAPES).to_dict()
            entry["expected_muon_bytes"] = {k: v * STEPS for k, v in expected.items()}
        report[name] = entry
    report["fsdp2"] = _fsdp2_run(rank, topology, hsdp, comm)
    if topology == Topology(2, 2):  # the probe with the gather/scatter pair, once
        from megahour.train.calibration import choose_strategy
        from megahour.train.costmodel import ALL_CANDIDATES

        report["choice"] = choose_strategy(comm, SHAPES, candidates=ALL_CANDIDATES).to_dict()
    return report


def _fsdp2_run(rank: int, topology: Topology, mesh: Any, comm: Comm) -> dict[str, Any]:
    """A model sharded by ``fully_shard`` on the HSDP mesh; gradients from a real backward."""
    from torch import nn
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(12, 21, bias=False), nn.Linear(21, 7, bias=False), nn.Linear(7, 5, bias=False)
    )
    reference_params = [p.detach().clone() for p in model.parameters()]
    fully_shard(model, mesh=mesh)
    params = list(model.parameters())
    optimizer = ShardedMuon(
        [{"params": params[:2]}, {"params": params[2:], "lr": 0.05}],
        strategy="fully_sharded",
        comm=comm,
        hyper=HYPER,
    )
    reference = HYPER.reference(
        [{"params": reference_params[:2]}, {"params": reference_params[2:], "lr": 0.05}]
    )
    for step in range(STEPS):
        gen = torch.Generator().manual_seed(10 + step + rank)  # different data per rank
        model(torch.randn(4, 12, generator=gen)).square().sum().backward()
        for p, q in zip(params, reference_params, strict=True):
            q.grad = p.grad.full_tensor()  # FSDP2's reduced gradient, whole
        optimizer.step()
        reference.step()
        optimizer.zero_grad()
    return {
        "params_equal": all(
            torch.equal(p.full_tensor(), q) for p, q in zip(params, reference_params, strict=True)
        ),
        "momentum_equal": all(
            torch.equal(
                optimizer.state[p]["momentum_buffer"].full_tensor(), reference.state[q]["momentum_buffer"]
            )
            for p, q in zip(params, reference_params, strict=True)
        ),
    }


LAYOUTS = [(2, 2), (4, 2)]


@pytest.fixture(scope="module", params=LAYOUTS, ids=[f"{n}x{g}" for n, g in LAYOUTS])
def reports(request) -> tuple[Topology, list[dict[str, Any]]]:
    topology = Topology(*request.param)
    return topology, run_local_world(topology, _strategy_worker, timeout_s=120)


STRATEGY_RUNS = ("world", "per_node", "fully_sharded_world", "fully_sharded_hsdp")


@pytest.mark.parametrize("run", STRATEGY_RUNS)
def test_every_sharded_strategy_is_bit_exact_to_torch_muon_with_param_groups(reports, run) -> None:
    _, per_rank = reports
    for rank, report in enumerate(per_rank):
        r = report[run]
        assert r["params_equal"], f"rank {rank}: parameters differ from torch.optim.Muon"
        assert r["momentum_equal"], f"rank {rank}: momentum differs"


@pytest.mark.parametrize("run", STRATEGY_RUNS)
def test_the_ledger_equals_the_closed_form_exactly(reports, run) -> None:
    _, per_rank = reports
    booked = per_rank[0][run]["muon_bytes"]
    assert booked == per_rank[0][run]["expected_muon_bytes"]
    if run == "fully_sharded_world":
        assert booked["inter"] > 0 and booked["ingress"] == booked["inter"]
    if run in ("per_node", "fully_sharded_hsdp"):
        assert booked["inter"] == 0


@pytest.mark.parametrize("run", ("fully_sharded_world", "fully_sharded_hsdp"))
def test_fully_sharded_momentum_is_a_dtensor_shard_of_every_matrix(reports, run) -> None:
    _, per_rank = reports
    for report in per_rank:
        r = report[run]
        assert r["owned"] == list(range(len(SHAPES)))
        assert r["shard_rows_match"], "DTensor's Shard(0) split differs from muon.shard_rows"
        assert r["momentum_is_dtensor_like_param"]


def test_a_model_sharded_by_fully_shard_steps_like_torch_muon(reports) -> None:
    _, per_rank = reports
    assert all(r["fsdp2"]["params_equal"] for r in per_rank), "parameters differ"
    assert all(r["fsdp2"]["momentum_equal"] for r in per_rank), "momentum differs"


def test_the_probe_measures_the_gather_scatter_pair_and_ranks_agree(reports) -> None:
    topology, per_rank = reports
    if topology != Topology(2, 2):
        pytest.skip("probed in the 2x2 world only")
    choices = [r["choice"] for r in per_rank]
    assert all(c == choices[0] for c in choices[1:]), "ranks chose differently"
    assert choices[0]["links"]["shard_bytes_per_s"] > 0
    assert "fully_sharded" in choices[0]["predictions"]
