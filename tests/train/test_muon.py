from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from megahour.train.comm import Comm, NonContiguousTensorError
from megahour.train.muon import (
    MuonHyper,
    ShardedMuon,
    Strategy,
    assign_owners,
    ns_flops,
    parameter_digest,
    route_parameters,
)
from megahour.train.topology import Topology

SHAPES = [(64, 32), (32, 64), (48, 48), (16, 80), (80, 16)]


def _step_both(hyper: MuonHyper, steps: int, seed: int = 0) -> tuple[list, list, object, object]:
    gen = torch.Generator().manual_seed(seed)
    ours = [torch.randn(s, generator=gen) for s in SHAPES]
    theirs = [p.clone() for p in ours]
    optimizer = ShardedMuon(ours, hyper=hyper)
    reference = hyper.reference(theirs)
    for _ in range(steps):
        for p, q in zip(ours, theirs, strict=True):
            g = torch.randn(p.shape, generator=gen)
            p.grad, q.grad = g.clone(), g.clone()
        optimizer.step()
        reference.step()
    return ours, theirs, optimizer, reference


@pytest.mark.parametrize(
    "hyper",
    [
        MuonHyper(),
        MuonHyper(lr=0.02, weight_decay=0.0, nesterov=False),
        MuonHyper(lr=0.01, momentum=0.9, adjust_lr_fn="match_rms_adamw", ns_steps=3),
    ],
    ids=["torch-defaults", "no-nesterov", "match-rms"],
)
def test_single_process_is_bit_exact_to_torch_muon(hyper: MuonHyper) -> None:
    ours, theirs, optimizer, reference = _step_both(hyper, steps=5)
    for p, q in zip(ours, theirs, strict=True):
        assert torch.equal(p, q)
        assert torch.equal(optimizer.state[p]["momentum_buffer"], reference.state[q]["momentum_buffer"])


def test_defaults_match_torch_muon() -> None:
    import inspect

    sig = inspect.signature(torch.optim.Muon)
    hyper = MuonHyper()
    for name in (
        "lr",
        "weight_decay",
        "momentum",
        "nesterov",
        "ns_coefficients",
        "eps",
        "ns_steps",
        "adjust_lr_fn",
    ):
        assert getattr(hyper, name) == sig.parameters[name].default, name


def test_the_equality_check_can_fail() -> None:
    """One more Newton-Schulz iteration changes the parameters: equality is not vacuous."""
    ours, theirs, _, _ = _step_both(MuonHyper(), steps=1)
    assert all(torch.equal(p, q) for p, q in zip(ours, theirs, strict=True))
    other, _, _, _ = _step_both(MuonHyper(ns_steps=6), steps=1)
    assert not any(torch.equal(p, q) for p, q in zip(ours, other, strict=True))


def test_rejects_non_matrices_like_torch() -> None:
    with pytest.raises(ValueError, match="only supports 2D parameters"):
        ShardedMuon([torch.zeros(4)])
    with pytest.raises(ValueError, match="only supports 2D parameters"):
        torch.optim.Muon([torch.zeros(4)])
    with pytest.raises(ValueError, match="adjust_lr_fn"):
        MuonHyper(adjust_lr_fn="spectral")


def test_sharded_strategy_without_comm_names_the_fix() -> None:
    optimizer = ShardedMuon([torch.zeros(3, 3)], strategy=Strategy.WORLD)
    with pytest.raises(ValueError, match="needs a Comm"):
        optimizer.layout()


@given(
    shapes=st.lists(st.tuples(st.integers(1, 256), st.integers(1, 256)), min_size=0, max_size=40),
    group=st.integers(1, 16),
)
@settings(max_examples=200, deadline=None)
def test_owner_layout_is_deterministic_complete_and_lpt_balanced(shapes, group) -> None:
    owners = assign_owners(shapes, group)
    assert owners == assign_owners(list(shapes), group)
    assert all(0 <= o < group for o in owners)
    load = [0] * group
    for s, o in zip(shapes, owners, strict=True):
        load[o] += ns_flops(s)
    if shapes:
        biggest = max(ns_flops(s) for s in shapes)
        assert max(load) <= sum(load) / group + biggest  # Graham's LPT bound


def test_ns_flops_formula() -> None:
    assert ns_flops((4, 8)) == 2 * 5 * 16 * (2 * 8 + 4)
    assert ns_flops((8, 4)) == ns_flops((4, 8))


class _Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 8)
        self.hidden = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)
        self.head = nn.Linear(8, 4)


def test_routing_sends_hidden_matrices_to_muon_and_the_rest_to_adamw() -> None:
    muon, adamw = route_parameters(_Tiny(), head_prefixes=("head",))
    assert [n for n, _ in muon] == ["hidden.weight"]
    assert [n for n, _ in adamw] == [
        "embed.weight",
        "hidden.bias",
        "norm.weight",
        "norm.bias",
        "head.weight",
        "head.bias",
    ]


def test_collectives_refuse_non_contiguous_views() -> None:
    comm = Comm(Topology(1, 1), rank=0)
    view = torch.zeros(8, 4, dtype=torch.bfloat16).T
    with pytest.raises(NonContiguousTensorError, match=r"tensor\.contiguous\(\)"):
        comm.broadcast(view, src=0)


def test_digest_sees_one_bit() -> None:
    a = [torch.ones(3, 3)]
    b = [torch.ones(3, 3)]
    assert parameter_digest(a) == parameter_digest(b)
    b[0][1, 1] = torch.nextafter(torch.tensor(1.0), torch.tensor(2.0))
    assert parameter_digest(a) != parameter_digest(b)


def test_learning_rate_changes_through_param_groups_like_torch() -> None:
    """Schedulers edit group["lr"]: the change must apply, exactly as in torch.optim.Muon."""
    gen = torch.Generator().manual_seed(5)
    ours = [torch.randn(s, generator=gen) for s in SHAPES]
    theirs = [p.clone() for p in ours]
    optimizer, reference = ShardedMuon(ours), MuonHyper().reference(theirs)
    for step in range(4):
        if step == 2:
            for group in (*optimizer.param_groups, *reference.param_groups):
                group["lr"] = 0.05
        for p, q in zip(ours, theirs, strict=True):
            g = torch.randn(p.shape, generator=gen)
            p.grad, q.grad = g.clone(), g.clone()
        optimizer.step()
        reference.step()
    assert all(torch.equal(p, q) for p, q in zip(ours, theirs, strict=True))
    unchanged = [p.clone() for p in _step_both(MuonHyper(), steps=4, seed=5)[0]]
    assert not all(torch.equal(p, q) for p, q in zip(ours, unchanged, strict=True))


def test_param_group_dicts_are_accepted_like_torch_muon() -> None:
    gen = torch.Generator().manual_seed(3)
    ours = [torch.randn(s, generator=gen) for s in SHAPES]
    theirs = [p.clone() for p in ours]
    optimizer = ShardedMuon(
        [{"params": ours[:2], "lr": 0.01}, {"params": ours[2:]}], hyper=MuonHyper(lr=0.03)
    )
    reference = torch.optim.Muon([{"params": theirs[:2], "lr": 0.01}, {"params": theirs[2:]}], lr=0.03)
    for _ in range(3):
        for p, q in zip(ours, theirs, strict=True):
            g = torch.randn(p.shape, generator=gen)
            p.grad, q.grad = g.clone(), g.clone()
        optimizer.step()
        reference.step()
    assert [g["lr"] for g in optimizer.param_groups] == [0.01, 0.03]
    assert all(torch.equal(p, q) for p, q in zip(ours, theirs, strict=True))
    with pytest.raises(ValueError, match="only supports 2D parameters"):
        ShardedMuon([{"params": [torch.zeros(3, 3)]}, {"params": [torch.zeros(3)]}])


def test_a_comm_for_another_world_size_is_refused() -> None:
    import torch.distributed as dist

    from megahour.train.spawn import free_port

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        with pytest.raises(ValueError, match=r"2x2 = 4 ranks.*1 ranks; build it with Topology.from_env"):
            ShardedMuon([torch.zeros(3, 3)], strategy="world", comm=Comm(Topology(2, 2), rank=0))
        ShardedMuon([torch.zeros(3, 3)], strategy="world", comm=Comm(Topology(1, 1), rank=0))
    finally:
        dist.destroy_process_group()


def test_fully_sharded_on_one_rank_is_torch_muon_and_plain_tensors_elsewhere_are_refused() -> None:
    """One rank: FSDP2 shards nothing (one GPU), so plain tensors are every matrix, owned here. In a
    larger world the shard group comes from the DTensors, and plain tensors name the fix."""
    from megahour.train.muon import _shard_group

    hyper = MuonHyper(lr=0.02)
    for comm in (Comm(Topology(1, 1), 0), None):
        ours = torch.randn(6, 4, generator=torch.Generator().manual_seed(1))
        theirs = ours.clone()
        optimizer = ShardedMuon([ours], strategy="fully_sharded", comm=comm, hyper=hyper)
        reference = hyper.reference([theirs])
        for step in range(3):
            ours.grad = torch.randn(6, 4, generator=torch.Generator().manual_seed(step))
            theirs.grad = ours.grad.clone()
            optimizer.step()
            reference.step()
        assert torch.equal(ours, theirs)
    with pytest.raises(ValueError, match="fully_shard"):
        _shard_group([torch.zeros(3, 3)])


def test_shard_rows_follow_torch_chunk() -> None:
    from megahour.train.muon import padded_shard_rows, shard_rows

    for rows in range(1, 20):
        for members in range(1, 9):
            sizes = [t.shape[0] for t in torch.zeros(rows).chunk(members)]
            sizes += [0] * (members - len(sizes))
            assert [shard_rows(rows, members, k) for k in range(members)] == sizes
            assert padded_shard_rows(rows, members) == max(sizes)
