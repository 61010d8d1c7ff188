"""The Slurm collector's Prometheus families (pure): node states, GPUs allocated, the queue.

``megahour metrics slurm`` asks the Slurm adapter (``sinfo``, ``sinfo``/``scontrol show nodes --json``,
``squeue --json``) on the monitoring server and writes these through node_exporter's textfile collector
(``megahour_slurm.prom``). A drained node's reason is the sweeper's ``megahour_node_drained{node,
reason}`` (one place decides what a reason's code is); the node's state here says drained or draining.

A query that fails leaves its families out and sets ``megahour_slurm_exporter_ok 0``; an answer Slurm
printed only in part (a job entry that could not be read) is kept and counted in
``megahour_slurm_exporter_skipped``, so a count that is short says so.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from megahour.metrics.textfile import Family, run_status
from megahour.slurm.parse import NodeGres, NodeState
from megahour.slurm.queue import QueuedJob

if TYPE_CHECKING:
    from megahour.slurm.client import SlurmClient

TEXTFILE_NAME = "megahour_slurm"
# sinfo %t's short states as words, for labels a person reads on a dashboard.
_STATE_WORDS = {
    "alloc": "allocated",
    "comp": "completing",
    "drain": "drained",
    "drng": "draining",
    "fail": "failed",
    "failg": "failing",
    "futr": "future",
    "maint": "maintenance",
    "mix": "mixed",
    "npc": "perfctrs",
    "plnd": "planned",
    "pow_dn": "powered_down",
    "pow_up": "powering_up",
    "resv": "reserved",
    "unk": "unknown",
}


def state_word(node: NodeState) -> str:
    """``drain*`` -> ``drained``; ``mix-`` -> ``mixed``; a state sinfo prints in full stays as printed."""
    return _STATE_WORDS.get(node.base_state, node.base_state)


def families(
    nodes: Sequence[NodeState] | None,
    gres: Sequence[NodeGres] | None,
    queue: Sequence[QueuedJob] | None,
    *,
    now: float,
    skipped: int = 0,
) -> list[Family]:
    """``None`` for a query that failed: its families are left out and the exporter is not ok."""
    ok = nodes is not None and gres is not None and queue is not None
    result = [
        *run_status("slurm", ok, "1 when every Slurm query of the last run answered.", now),
        Family(
            "megahour_slurm_exporter_skipped", "Entries of Slurm's answers the collector could not read."
        ).add(skipped),
    ]
    if nodes is not None:
        # sinfo --Node prints a node once per partition it is in.
        unique = {node.name: node for node in nodes}
        node_state = Family("megahour_slurm_node_state", "1 for each node, labelled with its state (sinfo).")
        not_responding = Family(
            "megahour_slurm_node_not_responding", "1 when slurmctld has lost contact with the node's slurmd."
        )
        for name, node in sorted(unique.items()):
            node_state.add(1, node=name, state=state_word(node))
            not_responding.add(1 if node.not_responding else 0, node=name)
        counts = Counter(state_word(node) for node in unique.values())
        by_state = Family("megahour_slurm_nodes", "Nodes in each state.")
        for state, count in sorted(counts.items()):
            by_state.add(count, state=state)
        result += [node_state, not_responding, by_state]
    if gres is not None:
        total = Family("megahour_slurm_gpus", "GPUs slurmctld configures on the node (Gres).")
        allocated = Family(
            "megahour_slurm_gpus_allocated",
            "GPUs slurmctld counts as allocated on the node (GresUsed, AllocTRES).",
        )
        for node in sorted(gres, key=lambda n: n.name):
            total.add(node.gpus, node=node.name)
            allocated.add(node.gpus_allocated, node=node.name)
        result += [total, allocated]
    if queue is not None:
        jobs = Family(
            "megahour_slurm_jobs",
            "Jobs slurmctld lists by partition and state (ended states: ended within MinJobAge).",
        )
        pending = Family("megahour_slurm_jobs_pending", "Pending jobs by partition and the reason they wait.")
        restarts = Family("megahour_slurm_job_restarts", "Requeues of the listed jobs, by partition.")
        for (partition, state), count in sorted(Counter((j.partition, j.state) for j in queue).items()):
            jobs.add(count, partition=partition, state=state)
        waiting = Counter((j.partition, j.reason) for j in queue if j.state == "PENDING")
        for (partition, reason), count in sorted(waiting.items()):
            pending.add(count, partition=partition, reason=reason)
        by_partition: Counter[str] = Counter()
        for job in queue:
            by_partition[job.partition] += job.restarts
        for partition, count in sorted(by_partition.items()):
            restarts.add(count, partition=partition)
        result += [jobs, pending, restarts]
    return result


@dataclass
class Collection:
    families: list[Family]
    counts: dict[str, int | None]  # query -> entries read; None where the query failed
    problems: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any(count is None for count in self.counts.values())


def collect(client: SlurmClient, now: float) -> Collection:
    """Ask ``client`` for nodes, their GPUs and the queue; a query that fails is left out, not retried."""
    from megahour.slurm.client import SlurmQueryError

    answers: dict[str, list | None] = {}
    problems: list[str] = []
    skipped = 0
    for name, query in (("nodes", client.nodes), ("gres", client.node_gres), ("queue", client.queue)):
        try:
            parsed = query()
        except SlurmQueryError as exc:
            problems.append(f"{name}: {exc}")
            answers[name] = None
            continue
        skipped += len(parsed.skipped)
        problems.extend(f"{name}: {note}" for note in parsed.skipped[:3])
        answers[name] = parsed.items
    return Collection(
        families(answers["nodes"], answers["gres"], answers["queue"], now=now, skipped=skipped),
        {name: None if items is None else len(items) for name, items in answers.items()},
        problems,
    )
