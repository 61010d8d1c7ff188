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
    # parse_sinfo_nodes already keeps one line a node (sinfo --Node prints one per partition)
    unfit = [
        n for n in states if n.name in wanted and (n.is_drained or n.not_responding or n.base_state in _DOWN)
    ]
    return sorted(unfit, key=lambda n: n.name)


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
