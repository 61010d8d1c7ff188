"""Muon with topology-aware sharding, bit-exact to ``torch.optim.Muon``.

Every strategy runs torch's own per-matrix math (``torch.optim._muon``: the EMA momentum, the Nesterov
lerp, ``_zeropower_via_newtonschulz``, ``_adjust_lr``, the decoupled weight decay), so after any number
of steps the parameters and momentum buffers are ``torch.equal`` to a single-process
``torch.optim.Muon`` fed the same gradients. The strategies differ only in who orthogonalizes what:

- ``replicated``: every rank orthogonalizes every matrix; no Muon traffic.
- ``world``: matrix ``i`` has one owner in the world (LPT over Newton-Schulz FLOPs). The owner keeps
  its momentum, orthogonalizes, and broadcasts the BF16 update ``O`` (2 bytes an element, contiguous)
  to every rank; every rank applies it.
- ``per_node``: the same inside each node's process group, with the same owner layout on every node:
  each node computes every update once and no Muon byte leaves a node. Nodes hold identical replicas
  because they run identical arithmetic on identical (all-reduced) gradients.

- ``fully_sharded``: parameters are FSDP2 DTensors (``fully_shard``: ``Shard(0)`` on the shard mesh
  dim, ``Replicate`` on an outer dim under HSDP). Every rank runs the momentum and Nesterov lerps on its
  own row shard (elementwise, so the same bits as on the full matrix); matrix ``i``'s fp32 update
  shards are gathered to its owner in the shard group (LPT, as above), padded to ``ceil(rows/S)`` rows
  since gloo gathers equal sizes only; the owner orthogonalizes the full matrix and scatters the BF16
  ``O`` back shard by shard; each rank applies its rows with the lr adjusted from the full shape. Each
  replica group of an HSDP mesh runs the same schedule (duplicated, like ``per_node``).

With one node, ``world`` and ``per_node`` are the same schedule (same group, same owners).

Momentum state: under ``replicated``, ``world`` and ``per_node``, ``state[p]["momentum_buffer"]`` is a
full tensor held by the matrix's owner only. Under ``fully_sharded`` every rank holds one for every
matrix: a DTensor with ``p``'s mesh and placements (its local tensor is this rank's rows), so
``torch.distributed.checkpoint`` and ``get_optimizer_state_dict`` save and reshard it as they do FSDP2
parameters, and ``.full_tensor()`` gives the matrix torch would hold.

Broadcasting ``O`` instead of the updated fp32 parameter is exact: every rank applies the same BF16
tensor with the same ``mul_``/``add_`` that torch runs. Gradients must already be identical on every
rank (the trainer all-reduces them first), and every rank must see the same set of parameters with
gradients, or the broadcast schedules diverge.

Parameter routing (:func:`route_parameters`): Muon takes the 2-D weights of hidden layers. AdamW takes
everything else: 0-D and 1-D parameters (norm gains, biases), parameters of ``nn.Embedding`` modules,
and parameters whose names start with one of the model's output-head prefixes. ``p.ndim == 2`` alone
is not enough, since embeddings and heads are 2-D and Muon is the wrong update for them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from enum import StrEnum
from typing import Any

import torch
from torch import nn
from torch.optim import _muon as torch_muon

from megahour.train.comm import Comm


class Strategy(StrEnum):
    REPLICATED = "replicated"
    WORLD = "world"
    PER_NODE = "per_node"
    FULLY_SHARDED = "fully_sharded"


def ns_flops(shape: Sequence[int], ns_steps: int = 5) -> int:
    """Newton-Schulz FLOPs for one matrix: ``2k·p²·(2q+p)`` with ``p = min``, ``q = max``."""
    p, q = min(shape[0], shape[1]), max(shape[0], shape[1])
    return 2 * ns_steps * p * p * (2 * q + p)


def assign_owners(shapes: Sequence[Sequence[int]], group_size: int, ns_steps: int = 5) -> list[int]:
    """Owner (index inside the sharding group) of each matrix: longest-processing-time first.

    Matrices are taken in order of falling Newton-Schulz cost (ties by index) and each goes to the
    least-loaded member (ties by lowest index). The result depends only on the shapes and the group
    size, so every rank computes the same layout with no communication. Any number of matrices works,
    divisible by the group size or not.
    """
    if group_size < 1:
        raise ValueError(f"sharding group size must be at least 1, got {group_size}")
    owners = [0] * len(shapes)
    load = [0] * group_size
    order = sorted(range(len(shapes)), key=lambda i: (-ns_flops(shapes[i], ns_steps), i))
    for i in order:
        member = min(range(group_size), key=lambda m: (load[m], m))
        owners[i] = member
        load[member] += ns_flops(shapes[i], ns_steps)
    return owners


@dataclass(frozen=True)
class MuonHyper:
    """``torch.optim.Muon``'s hyperparameters, with its defaults (torch 2.13)."""

    lr: float = 1e-3
    weight_decay: float = 0.1
    momentum: float = 0.95
    nesterov: bool = True
    ns_coefficients: tuple[float, float, float] = (
        torch_muon.DEFAULT_A,
        torch_muon.DEFAULT_B,
        torch_muon.DEFAULT_C,
    )
    eps: float = 1e-7
    ns_steps: int = torch_muon.DEFAULT_NS_STEPS
    adjust_lr_fn: str | None = None

    def __post_init__(self) -> None:
        if self.adjust_lr_fn not in (None, "original", "match_rms_adamw"):
            raise ValueError(
                f"adjust_lr_fn {self.adjust_lr_fn!r} is not one of None, 'original', 'match_rms_adamw'"
            )
        if not 0.0 <= self.momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {self.momentum}")

    def reference(self, params: Iterable[torch.Tensor]) -> torch.optim.Muon:
        """Single-process ``torch.optim.Muon`` with these hyperparameters: what every strategy must equal."""
        return torch.optim.Muon(
            params,
            lr=self.lr,
            weight_decay=self.weight_decay,
            momentum=self.momentum,
            nesterov=self.nesterov,
            ns_coefficients=self.ns_coefficients,
            eps=self.eps,
            ns_steps=self.ns_steps,
            adjust_lr_fn=self.adjust_lr_fn,
        )


def momentum_update(grad: torch.Tensor, momentum_buffer: torch.Tensor, hp: MuonHyper) -> torch.Tensor:
    """EMA momentum (in place on ``momentum_buffer``) and the Nesterov lerp: the fp32 input of
    Newton-Schulz. Elementwise, so a row shard gives the same bits as the full matrix."""
    momentum_buffer.lerp_(grad, 1 - hp.momentum)
    return grad.lerp(momentum_buffer, hp.momentum) if hp.nesterov else momentum_buffer


def orthogonalize(update: torch.Tensor, hp: MuonHyper) -> torch.Tensor:
    """torch's Newton-Schulz on the full matrix: the BF16 update ``O``, made contiguous (for tall
    matrices torch returns a transposed view, which a gloo collective would corrupt)."""
    ortho = torch_muon._zeropower_via_newtonschulz(update, hp.ns_coefficients, hp.ns_steps, hp.eps)
    return ortho.contiguous()


def muon_direction(grad: torch.Tensor, momentum_buffer: torch.Tensor, hp: MuonHyper) -> torch.Tensor:
    """Momentum step (in place on ``momentum_buffer``) and orthogonalization: the BF16 update ``O``.

    The same operations as ``torch.optim._muon._single_tensor_muon``.
    """
    return orthogonalize(momentum_update(grad, momentum_buffer, hp), hp)


def apply_update(
    param: torch.Tensor, ortho: torch.Tensor, hp: MuonHyper, full_shape: Sequence[int] | None = None
) -> None:
    """Decoupled weight decay with the unadjusted lr, then the scaled update, as torch does.

    ``full_shape``: the whole matrix's shape when ``param`` is a row shard of it (the lr scale
    depends on the matrix, not the shard).
    """
    shape = torch.Size(full_shape) if full_shape is not None else param.shape
    adjusted_lr = torch_muon._adjust_lr(hp.lr, hp.adjust_lr_fn, shape)
    param.mul_(1 - hp.lr * hp.weight_decay)
    param.add_(ortho, alpha=-adjusted_lr)


def shard_rows(rows: int, members: int, index: int) -> int:
    """Rows member ``index`` of ``members`` holds under ``Shard(0)`` (torch.chunk's split, as FSDP2 and
    DTensor use): ``ceil(rows/members)`` each until the rows run out, then fewer or none."""
    chunk = -(-rows // members)
    return max(0, min(chunk, rows - index * chunk))


def padded_shard_rows(rows: int, members: int) -> int:
    """The rows every member sends in the padded equal-size gather and scatter: ``ceil(rows/S)``."""
    return -(-rows // members)


class ShardedMuon(torch.optim.Optimizer):
    """``torch.optim.Muon`` with its orthogonalization sharded over ranks by ``strategy``.

    ``params``: tensors or param-group dicts, as ``torch.optim.Muon`` takes them. Momentum buffers live
    only on each matrix's owner (``state[p]["momentum_buffer"]``); under ``replicated`` that is every
    rank, under ``fully_sharded`` every rank holds a DTensor shard of every buffer (module docstring).
    ``comm`` is required for ``world``, ``per_node`` and ``fully_sharded`` unless the world has one rank.
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        *,
        strategy: Strategy | str = Strategy.REPLICATED,
        comm: Comm | None = None,
        hyper: MuonHyper | None = None,
    ) -> None:
        hp = hyper or MuonHyper()
        _check_world_size(comm)
        # Set before Optimizer.__init__: it calls add_param_group, which resets the layout.
        self.strategy = Strategy(strategy)
        self.comm = comm
        self.hyper = hp
        self._layout: tuple[Any, list[int]] | None = None
        # Hyperparameters live in param_groups, as in torch's optimizers, so LR schedulers and per-group
        # settings work; ``hyper`` gives the defaults.
        super().__init__(params, asdict(hp))

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        super().add_param_group(param_group)
        for p in self.param_groups[-1]["params"]:
            if p.ndim != 2:
                raise ValueError(
                    f"Muon only supports 2D parameters whereas we found a parameter with size: {p.size()}"
                )
        self._layout = None  # owners are recomputed (every rank must add the same groups)

    def _group_hypers(self) -> list[tuple[MuonHyper, list[torch.Tensor]]]:
        names = [f.name for f in fields(MuonHyper)]
        return [(MuonHyper(**{n: group[n] for n in names}), group["params"]) for group in self.param_groups]

    # Layout ----------------------------------------------------------------------------------------
    def flat_params(self) -> list[torch.Tensor]:
        """Every parameter in group order: the indices owners, momentum keys and checkpoints use."""
        return [p for group in self.param_groups for p in group["params"]]

    def layout(self) -> tuple[Any, list[int]]:
        """(process group, global owner rank of each matrix); ``None`` group means no collectives."""
        if self._layout is None:
            params = self.flat_params()
            shapes = [tuple(p.shape) for p in params]
            comm = self.comm
            if self.strategy is Strategy.FULLY_SHARDED and _one_rank(comm):
                # One rank: FSDP2 leaves nothing sharded (the trainer does not wrap a world of one),
                # and every matrix is this rank's; the gather and scatter below are no-ops.
                self._layout = (None, [comm.rank if comm is not None else 0] * len(params))
            elif self.strategy is Strategy.FULLY_SHARDED:
                if comm is None:
                    raise ValueError("strategy fully_sharded needs a Comm (the ledger and collectives)")
                group = _shard_group(params)
                members = comm.group_ranks(group)
                owners = assign_owners(shapes, len(members), self.hyper.ns_steps)
                self._layout = (group, [members[o] for o in owners])
            elif self.strategy is Strategy.REPLICATED or comm is None or comm.topology.world_size == 1:
                if self.strategy is not Strategy.REPLICATED and comm is None:
                    raise ValueError(f"strategy {self.strategy.value} needs a Comm (the process groups)")
                rank = comm.rank if comm is not None else 0
                self._layout = (None, [rank] * len(params))
            elif self.strategy is Strategy.WORLD:
                members = list(range(comm.topology.world_size))
                owners = assign_owners(shapes, len(members), self.hyper.ns_steps)
                self._layout = (None, [members[o] for o in owners])
            else:
                members = comm.topology.node_ranks(comm.topology.node_of(comm.rank))
                group = comm.node_group()
                owners = assign_owners(shapes, len(members), self.hyper.ns_steps)
                self._layout = (group, [members[o] for o in owners])
        return self._layout

    def owned(self) -> list[int]:
        """Indices (into the flat parameter list) of the matrices whose momentum this rank holds: the
        ones it orthogonalizes, or every one under ``fully_sharded`` (a shard of each)."""
        if self.strategy is Strategy.FULLY_SHARDED:
            return list(range(len(self.flat_params())))
        return self.orthogonalized()

    def orthogonalized(self) -> list[int]:
        """Indices of the matrices this rank runs Newton-Schulz for."""
        rank = self.comm.rank if self.comm is not None else 0
        return [i for i, owner in enumerate(self.layout()[1]) if owner == rank]

    # Step --------------------------------------------------------------------------------------------
    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        group, owners = self.layout()
        rank = self.comm.rank if self.comm is not None else 0
        params = self.flat_params()
        hypers = [hp for hp, members in self._group_hypers() for _ in members]
        if self.strategy is Strategy.FULLY_SHARDED and self.comm is not None:
            self._step_fully_sharded(params, hypers, owners, group)
            return loss
        updates: dict[int, torch.Tensor] = {}
        # Owners first orthogonalize everything they own, then the broadcasts run in parameter order on
        # every rank: the compute is not interleaved with waiting on other owners.
        for i, p in enumerate(params):
            if p.grad is None or owners[i] != rank:
                continue
            _check_grad(p)
            state = self.state[p]
            if "momentum_buffer" not in state:
                state["momentum_buffer"] = torch.zeros_like(p.grad, memory_format=torch.preserve_format)
            updates[i] = muon_direction(p.grad, state["momentum_buffer"], hypers[i])
        sharded = self._sharded()
        for i, p in enumerate(params):
            if p.grad is None:
                continue
            if sharded:
                assert self.comm is not None
                if i not in updates:
                    updates[i] = torch.empty(p.shape, dtype=torch.bfloat16, device=p.device)
                self.comm.broadcast(updates[i], src=owners[i], group=group, tag="muon")
            apply_update(p, updates[i], hypers[i])
        return loss

    def _step_fully_sharded(
        self, params: list[torch.Tensor], hypers: list[MuonHyper], owners: list[int], group: Any
    ) -> None:
        """Gather every update to its owner, orthogonalize, scatter back: in three passes, so owners do
        not compute between other owners' collectives and every rank runs the collectives in one order."""
        comm = self.comm
        assert comm is not None
        members = len(comm.group_ranks(group))
        gathered: dict[int, list[torch.Tensor]] = {}
        for i, p in enumerate(params):
            if p.grad is None:
                continue
            _check_grad(p)
            state = self.state[p]
            if "momentum_buffer" not in state:
                # A DTensor with p's placements: DCP checkpoints it like the FSDP2 parameter.
                state["momentum_buffer"] = torch.zeros_like(p.grad, memory_format=torch.preserve_format)
            update = momentum_update(_local(p.grad), _local(state["momentum_buffer"]), hypers[i])
            chunk = _pad_rows(update, padded_shard_rows(p.shape[0], members))
            parts = comm.gather(chunk, dst=owners[i], group=group, tag="muon")
            if parts is not None:
                gathered[i] = parts
        scattered = {
            i: self._orthogonalize_parts(params[i], parts, hypers[i]) for i, parts in gathered.items()
        }
        for i, p in enumerate(params):
            if p.grad is None:
                continue
            local = _local(p)
            out = torch.empty(
                (padded_shard_rows(p.shape[0], members), p.shape[1]),
                dtype=torch.bfloat16,
                device=local.device,
            )
            comm.scatter(out, scattered.get(i), src=owners[i], group=group, tag="muon")
            apply_update(local, out[: local.shape[0]], hypers[i], full_shape=p.shape)

    @staticmethod
    def _orthogonalize_parts(p: torch.Tensor, parts: list[torch.Tensor], hp: MuonHyper) -> list[torch.Tensor]:
        """The owner's work: unpad and join the gathered shards, orthogonalize, split and pad again."""
        rows, members = p.shape[0], len(parts)
        sizes = [shard_rows(rows, members, k) for k in range(members)]
        full = torch.cat([part[:n] for part, n in zip(parts, sizes, strict=True)])
        ortho = orthogonalize(full, hp)
        padded = padded_shard_rows(rows, members)
        return [_pad_rows(piece, padded) for piece in torch.split(ortho, sizes)]

    def _sharded(self) -> bool:
        return (
            self.strategy is not Strategy.REPLICATED
            and self.comm is not None
            and self.comm.topology.world_size > 1
        )


def _check_world_size(comm: Comm | None) -> None:
    """A Comm declaring another world than the process group's would book and route wrongly."""
    import torch.distributed as dist

    if comm is None or not (dist.is_available() and dist.is_initialized()):
        return
    actual = dist.get_world_size()
    topo = comm.topology
    if topo.world_size != actual:
        raise ValueError(
            f"the Comm's topology ({topo.nodes}x{topo.gpus_per_node} = {topo.world_size} ranks) does not "
            f"match the process group's {actual} ranks; build it with Topology.from_env(os.environ)"
        )


def _one_rank(comm: Comm | None) -> bool:
    import torch.distributed as dist

    world = comm.topology.world_size if comm is not None else 1
    return world == 1 and (not dist.is_initialized() or dist.get_world_size() == 1)


def _local(t: torch.Tensor) -> torch.Tensor:
    """This rank's shard of a DTensor (the same storage: in-place updates reach the DTensor)."""
    from torch.distributed.tensor import DTensor

    return t.to_local() if isinstance(t, DTensor) else t


def _pad_rows(t: torch.Tensor, rows: int) -> torch.Tensor:
    """``t`` with zero rows appended up to ``rows``, contiguous (gloo gathers equal sizes only)."""
    if t.shape[0] == rows:
        return t.contiguous()
    out = t.new_zeros((rows, *t.shape[1:]))
    out[: t.shape[0]] = t
    return out


def _shard_group(params: Sequence[torch.Tensor]) -> Any:
    """The process group of the mesh dim the parameters are ``Shard(0)`` on (one mesh for all)."""
    from torch.distributed.tensor import DTensor

    mesh, dim = None, None
    for p in params:
        if not isinstance(p, DTensor):
            raise ValueError(
                f"fully_sharded needs DTensor parameters, got a plain {tuple(p.shape)} tensor; call "
                "torch.distributed.fsdp.fully_shard on the model first, or pick world or per_node"
            )
        shard = [d for d, pl in enumerate(p.placements) if pl.is_shard(0)]
        if len(shard) != 1 or any(
            not pl.is_replicate() for d, pl in enumerate(p.placements) if d != shard[0]
        ):
            raise ValueError(
                f"fully_sharded needs Shard(0) on one mesh dim and Replicate on the others (FSDP2, "
                f"HSDP), got {p.placements}; shard the model with fully_shard"
            )
        if mesh is None:
            mesh, dim = p.device_mesh, shard[0]
        elif p.device_mesh != mesh or shard[0] != dim:
            raise ValueError(
                "fully_sharded needs every Muon parameter on one device mesh, sharded on one dim; "
                "fully_shard the model with a single mesh"
            )
    if mesh is None:
        return None  # no parameters: no collectives
    assert dim is not None
    return mesh.get_group(dim)


def _check_grad(p: torch.Tensor) -> None:
    if torch.is_complex(p):
        raise RuntimeError("Muon does not support complex parameters")
    if p.grad is not None and p.grad.is_sparse:
        raise RuntimeError("Muon does not support sparse gradients")


def route_parameters(
    model: nn.Module, head_prefixes: Sequence[str] = ()
) -> tuple[list[tuple[str, nn.Parameter]], list[tuple[str, nn.Parameter]]]:
    """Split ``model``'s trainable parameters into (Muon, AdamW) lists of (name, parameter).

    Muon: 2-D parameters that belong to no ``nn.Embedding`` and whose names start with none of
    ``head_prefixes``. AdamW: everything else. Order follows ``model.named_parameters()``.
    """
    embedding_params = {
        id(p) for module in model.modules() if isinstance(module, nn.Embedding) for p in module.parameters()
    }
    muon, adamw = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        is_head = any(name == h or name.startswith(h + ".") for h in head_prefixes)
        if p.ndim == 2 and id(p) not in embedding_params and not is_head:
            muon.append((name, p))
        else:
            adamw.append((name, p))
    return muon, adamw


def parameter_digest(params: Iterable[torch.Tensor]) -> str:
    """BLAKE2b of the parameters' bytes, in order: equal digests mean bit-identical replicas."""
    h = hashlib.blake2b(digest_size=16)
    for p in params:
        t = p.detach().cpu().contiguous()
        h.update(str((tuple(t.shape), str(t.dtype))).encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()
