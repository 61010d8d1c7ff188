"""Is this job's allocation still fit to restart on? Asked before every restart in place.

A step that died because its node is failing (a fatal Xid, the health check already drained the node)
would die again if restarted onto the same nodes. When any node of the allocation is drained or
draining, `megahour run` exits for requeue instead, and Slurm starts the job again on healthy nodes.
"""

from __future__ import annotations

from collections.abc import Mapping

from megahour.slurm.client import SlurmClient, SlurmQueryError
from megahour.slurm.parse import NodeState

NODELIST_ENV = "SLURM_JOB_NODELIST"
# sinfo's short states (%t) of a node that cannot run the step.
_DOWN = frozenset({"down", "fail", "failg"})


def unfit_nodes(allocation: list[str], states: list[NodeState]) -> list[NodeState]:
    """The allocation's nodes that are drained, draining, down, failing or not responding (sinfo's view)."""
    wanted = set(allocation)
    seen: dict[str, NodeState] = {}
    for node in states:
        if node.name in wanted and (node.is_drained or node.not_responding or node.base_state in _DOWN):
            seen.setdefault(node.name, node)  # sinfo --Node prints a node once per partition
    return [seen[name] for name in sorted(seen)]


def describe(nodes: list[NodeState]) -> str:
    parts = [f"{n.name} is {n.state}" + (f" ({n.reason})" if n.reason else "") for n in nodes]
    return "node " + ", ".join(parts)


def check(env: Mapping[str, str], client: SlurmClient | None = None) -> str | None:
    """A reason not to restart in place, or None. Fails closed: an unreadable state is a reason.

    Outside a Slurm job (no ``SLURM_JOB_NODELIST``) there is no allocation to judge.
    """
    nodelist = env.get(NODELIST_ENV, "").strip()
    if not nodelist:
        return None
    client = client or SlurmClient()
    try:
        unfit = unfit_nodes(client.hostnames(nodelist), client.nodes().items)
    except (SlurmQueryError, ValueError) as exc:
        return f"could not read the state of the job's nodes ({exc})"
    return describe(unfit) if unfit else None
