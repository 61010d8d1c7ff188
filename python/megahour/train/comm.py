"""The communication layer: every collective the trainer and optimizer make, counted by link class.

The optimizer never calls ``torch.distributed`` itself; it calls a :class:`Comm`, which checks the
tensor (contiguous, or gloo sends wrong bytes without an error), runs the collective and books its
bytes in a :class:`ByteLedger` under a tag (``muon``, ``grad``, ``probe``). Tests read the ledger and
compare it with the cost model's closed forms (``costmodel``), exactly.

What a ledger entry counts, in bytes summed over the whole job (so every figure is an integer):

- ``intra`` / ``inter``: logical deliveries. A broadcast of ``b`` bytes to ``k`` receivers on the
  sender's node and ``j`` on other nodes adds ``b·k`` intra and ``b·j`` inter.
- ``ingress``: bytes that must enter a node over the fabric with a hierarchical algorithm: ``b`` per
  other node that has a receiver. Per node, divide by the node count.
- ``collectives``: calls, the number that latency (alpha) is paid on.

- A gather to a root of ``b`` bytes from every other member adds ``b`` per sender, intra or inter by
  the sender's node; a scatter of ``b`` bytes a member adds ``b`` per receiver likewise. Every member's
  chunk is distinct data, so nothing can be shared on the way: ingress equals inter for both.

Each collective is booked once, by one participant: a broadcast by its source, a gather or scatter by
its root, an all-reduce by the lowest rank of its group. So one rank's ledger holds what it started,
and the sum of every rank's ledger (:meth:`Comm.job_totals`) is the job's traffic, with nothing counted
twice.

An all-reduce of ``b`` bytes is booked as a hierarchical ring: inside each node of the group a
reduce-scatter plus all-gather (``2(g-1)·b`` received per node of ``g`` members, intra), and between
the ``K`` nodes a ring over node leaders (``2(K-1)·b`` in total, inter and ingress alike).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from megahour.train.topology import Topology

if TYPE_CHECKING:
    import torch


@dataclass
class LinkBytes:
    intra: int = 0
    inter: int = 0
    ingress: int = 0
    collectives: int = 0

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


class ByteLedger:
    """Bytes per tag and link class. Pure bookkeeping: it needs no process group."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self._by_tag: dict[str, LinkBytes] = defaultdict(LinkBytes)

    def __getitem__(self, tag: str) -> LinkBytes:
        return self._by_tag[tag]

    def tags(self) -> list[str]:
        return sorted(self._by_tag)

    def to_dict(self) -> dict[str, dict[str, int]]:
        return {tag: self._by_tag[tag].to_dict() for tag in self.tags()}

    def reset(self) -> None:
        self._by_tag.clear()

    def _peers(self, root: int, group: Sequence[int], op: str) -> tuple[list[int], int]:
        """The members other than ``root``, and how many of them share its node."""
        if root not in group:
            raise ValueError(f"{op} root rank {root} is not in its group {list(group)}")
        home = self.topology.node_of(root)
        others = [r for r in group if r != root]
        return others, sum(1 for r in others if self.topology.node_of(r) == home)

    def broadcast(self, nbytes: int, src: int, group: Sequence[int], tag: str) -> None:
        receivers, same = self._peers(src, group, "broadcast")
        other_nodes = {self.topology.node_of(r) for r in receivers} - {self.topology.node_of(src)}
        entry = self._by_tag[tag]
        entry.intra += nbytes * same
        entry.inter += nbytes * (len(receivers) - same)
        entry.ingress += nbytes * len(other_nodes)  # one copy a node with a hierarchical broadcast
        entry.collectives += 1

    def gather(self, nbytes: int, root: int, group: Sequence[int], tag: str) -> None:
        """Every member but ``root`` sends ``nbytes`` (its own chunk) to ``root``."""
        self._point_to_root(nbytes, root, group, tag, "gather")

    def scatter(self, nbytes: int, root: int, group: Sequence[int], tag: str) -> None:
        """``root`` sends ``nbytes`` (a distinct chunk) to every other member."""
        self._point_to_root(nbytes, root, group, tag, "scatter")

    def _point_to_root(self, nbytes: int, root: int, group: Sequence[int], tag: str, op: str) -> None:
        # Gather and scatter move the same bytes over the same links, only in opposite directions.
        others, same = self._peers(root, group, op)
        entry = self._by_tag[tag]
        entry.intra += nbytes * same
        entry.inter += nbytes * (len(others) - same)
        entry.ingress += nbytes * (len(others) - same)  # distinct chunks: no hierarchical sharing
        entry.collectives += 1

    def all_reduce(self, nbytes: int, group: Sequence[int], tag: str) -> None:
        members_per_node: dict[int, int] = defaultdict(int)
        for r in group:
            members_per_node[self.topology.node_of(r)] += 1
        entry = self._by_tag[tag]
        entry.intra += sum(2 * (g - 1) * nbytes for g in members_per_node.values())
        nodes = len(members_per_node)
        entry.inter += 2 * (nodes - 1) * nbytes
        entry.ingress += 2 * (nodes - 1) * nbytes
        entry.collectives += 1


class NonContiguousTensorError(ValueError):
    """A collective was handed a view whose memory is not laid out as its shape says."""


class Comm:
    """Collectives over ``torch.distributed`` with byte accounting. One per rank.

    ``group=None`` means the whole world; other groups are resolved with
    ``dist.get_process_group_ranks``. ``node_group``: this rank's intra-node process group when the
    caller already has one (a DeviceMesh's ``mesh["intra"].get_group()``); without it :meth:`node_group`
    creates every node's group by enumeration on first use.
    """

    def __init__(
        self, topology: Topology, rank: int, ledger: ByteLedger | None = None, node_group: Any = None
    ) -> None:
        self.topology = topology
        self.rank = rank
        self.ledger = ledger if ledger is not None else ByteLedger(topology)
        self._node_group: Any = node_group
        self._node_group_checked = node_group is None

    # Groups ----------------------------------------------------------------------------------------
    def node_group(self) -> Any:
        """This rank's per-node process group (created on first use, collectively on every rank).

        ``new_subgroups_by_enumeration`` makes one group per node on every rank, in the same order, as
        c10d requires; ``new_subgroups(group_size=None)`` would refuse on CPU.
        """
        if self._node_group is None:
            import torch.distributed as dist

            if self.topology.nodes == 1:
                self._node_group = dist.group.WORLD
            else:
                mine, _ = dist.new_subgroups_by_enumeration(self.topology.all_node_ranks())
                self._node_group = mine
        if not self._node_group_checked:
            self._check_node_group()
        return self._node_group

    def _check_node_group(self) -> None:
        """A handed-in group must be exactly this rank's node, or the ledger books the wrong links."""
        expected = self.topology.node_ranks(self.topology.node_of(self.rank))
        got = self.group_ranks(self._node_group)
        if got != expected:
            raise ValueError(
                f"node_group has ranks {got} but rank {self.rank}'s node is {expected} in a "
                f"{self.topology.nodes}x{self.topology.gpus_per_node} topology; pass the mesh dim "
                "that spans one node (mesh['intra'].get_group())"
            )
        self._node_group_checked = True

    def group_ranks(self, group: Any) -> list[int]:
        import torch.distributed as dist

        if group is None or group is dist.group.WORLD:
            return list(range(self.topology.world_size))
        return list(dist.get_process_group_ranks(group))

    # Collectives -------------------------------------------------------------------------------------
    def broadcast(self, tensor: torch.Tensor, src: int, group: Any = None, tag: str = "muon") -> None:
        """Broadcast ``tensor`` from global rank ``src`` to every rank of ``group``, in place."""
        import torch.distributed as dist

        _require_contiguous(tensor, "broadcast")
        ranks = self.group_ranks(group)
        if len(ranks) > 1:
            dist.broadcast(tensor, src=src, group=group)
            if self.rank == src:
                self.ledger.broadcast(_nbytes(tensor), src, ranks, tag)

    def gather(
        self, tensor: torch.Tensor, dst: int, group: Any = None, tag: str = "muon"
    ) -> list[torch.Tensor] | None:
        """Every rank of ``group`` sends ``tensor`` to global rank ``dst``; ``dst`` gets the list in group
        order (its own tensor included), the others ``None``. Tensors must have one shape and dtype on
        every rank (gloo refuses uneven gathers): pad first."""
        import torch
        import torch.distributed as dist

        _require_contiguous(tensor, "gather")
        ranks = self.group_ranks(group)
        if len(ranks) == 1:
            return [tensor]
        out = [torch.empty_like(tensor) for _ in ranks] if self.rank == dst else None
        dist.gather(tensor, gather_list=out, dst=dst, group=group)
        if self.rank == dst:
            self.ledger.gather(_nbytes(tensor), dst, ranks, tag)
        return out

    def scatter(
        self,
        out: torch.Tensor,
        chunks: Sequence[torch.Tensor] | None,
        src: int,
        group: Any = None,
        tag: str = "muon",
    ) -> None:
        """Global rank ``src`` sends ``chunks[k]`` to the ``k``-th rank of ``group`` (into ``out``, in
        place); ``chunks`` is read on ``src`` only, one tensor per member, each shaped like ``out``."""
        import torch.distributed as dist

        _require_contiguous(out, "scatter")
        ranks = self.group_ranks(group)
        if self.rank == src:
            if chunks is None or len(chunks) != len(ranks):
                raise ValueError(
                    f"scatter from rank {src} needs one chunk per member of {ranks}, got "
                    f"{None if chunks is None else len(chunks)}; pass a list as long as the group"
                )
            for chunk in chunks:
                _require_contiguous(chunk, "scatter")
        if len(ranks) == 1:
            assert chunks is not None
            out.copy_(chunks[0])
            return
        dist.scatter(out, scatter_list=list(chunks) if self.rank == src else None, src=src, group=group)  # type: ignore[arg-type]
        if self.rank == src:
            self.ledger.scatter(_nbytes(out), src, ranks, tag)

    def all_reduce(self, tensor: torch.Tensor, group: Any = None, tag: str = "grad") -> None:
        """Sum ``tensor`` over ``group``, in place."""
        import torch.distributed as dist

        _require_contiguous(tensor, "all_reduce")
        ranks = self.group_ranks(group)
        if len(ranks) > 1:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
            if self.rank == min(ranks):
                self.ledger.all_reduce(_nbytes(tensor), ranks, tag)

    def all_gather_object(self, obj: Any, group: Any = None) -> list[Any]:
        """Small control-plane values (hashes, timings); not booked, they are not training traffic."""
        import torch.distributed as dist

        ranks = self.group_ranks(group)
        if len(ranks) == 1:
            return [obj]
        out: list[Any] = [None] * len(ranks)
        dist.all_gather_object(out, obj, group=group)
        return out

    def job_totals(self) -> dict[str, LinkBytes]:
        """Every rank's ledger summed (a collective call: every rank must make it)."""
        totals: dict[str, LinkBytes] = {}
        for ledger in self.all_gather_object(self.ledger.to_dict()):
            for tag, counts in ledger.items():
                entry = totals.setdefault(tag, LinkBytes())
                for key, value in counts.items():
                    setattr(entry, key, getattr(entry, key) + value)
        return totals

    def barrier(self, group: Any = None) -> None:
        import torch.distributed as dist

        if len(self.group_ranks(group)) > 1:
            dist.barrier(group=group)


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def _require_contiguous(tensor: torch.Tensor, op: str) -> None:
    if not tensor.is_contiguous():
        raise NonContiguousTensorError(
            f"{op} of a non-contiguous {tuple(tensor.shape)} {tensor.dtype} view: gloo sends such "
            "views wrong without an error; pass tensor.contiguous()"
        )


__all__ = ["ByteLedger", "Comm", "LinkBytes", "NonContiguousTensorError"]
