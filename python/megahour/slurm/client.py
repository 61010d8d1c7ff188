"""Run Slurm's command-line tools. Every failure is one exception, ``SlurmQueryError``.

The sweeper must fail closed: a sinfo that timed out or an scontrol that
exited non-zero must never look like "no drained nodes" or "no jobs". So no
method here returns partial data on error; parsing is left to ``parse`` and
``jobs``. The same goes for jobs: an squeue that failed must never look like
"no live job of that name", or a caller would submit a duplicate.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from megahour.slurm.jobs import (
    LiveJob,
    check_sbatch_args,
    parse_sbatch_job_id,
    parse_squeue_jobs,
    scancel_args,
    squeue_by_name_args,
)
from megahour.slurm.parse import (
    NODES_JSON_ARGS,
    RESERVATIONS_ARGS,
    SINFO_JSON_ARGS,
    SINFO_NODES_ARGS,
    SQUEUE_JSON_ARGS,
    SQUEUE_RUNNING_ARGS,
    SSTAT_BATCH_ARGS,
    JobGpus,
    NodeGres,
    NodeState,
    Parsed,
    Reservation,
    RunningJob,
    json_errors,
    parse_nodes_gres_json,
    parse_reservations,
    parse_sinfo_nodes,
    parse_squeue_gpus_json,
    parse_squeue_running,
    parse_sstat_job_ids,
    sinfo_json_grouped,
)
from megahour.slurm.queue import QueuedJob, parse_squeue_queue_json

# Same call shape as subprocess.run; tests inject a fake.
Runner = Callable[..., subprocess.CompletedProcess[Any]]

DEFAULT_TIMEOUT_S = 10.0
# A node name or reservation name is one token; anything else would let a value
# smuggle extra Key=Value pairs into scontrol's argument parsing.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-]*")


class SlurmQueryError(RuntimeError):
    """A Slurm command failed: non-zero exit, timeout, or missing binary.

    ``returncode`` is the command's exit status, or None when it did not run to the end (then
    ``__cause__`` is the OSError or ``subprocess.TimeoutExpired``).
    """

    def __init__(
        self, command: Sequence[str], stderr: str, message: str, returncode: int | None = None
    ) -> None:
        self.command = list(command)
        self.stderr = stderr
        self.message = message
        self.returncode = returncode
        detail = f": {stderr.strip()}" if stderr.strip() else ""
        super().__init__(f"`{' '.join(self.command)}` {message}{detail}")


def slurm_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's environment) with ``SLURM_TIME_FORMAT=standard``."""
    base = dict(os.environ if env is None else env)
    # ISO timestamps whatever the site's SLURM_TIME_FORMAT says; the parsers rely on it.
    base["SLURM_TIME_FORMAT"] = "standard"
    return base


class SlurmClient:
    """sinfo/squeue/scontrol/scancel with a per-call timeout (jobs are submitted from the triggerer)."""

    def __init__(
        self,
        runner: Runner = subprocess.run,
        timeout: float = DEFAULT_TIMEOUT_S,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.runner = runner
        self.timeout = timeout
        self.env = slurm_env(env)
        # The command that lists every node's GPUs: sinfo until it answers grouped (``node_gres``).
        self.node_gres_args: tuple[str, ...] = SINFO_JSON_ARGS

    def _run(self, args: Sequence[str]) -> str:
        argv = list(args)
        try:
            proc = self.runner(
                argv,
                capture_output=True,
                text=True,
                timeout=self.timeout,
                check=False,
                env=self.env,
            )
        except subprocess.TimeoutExpired as exc:
            stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr
            raise SlurmQueryError(argv, stderr or "", f"timed out after {self.timeout:g}s") from exc
        except FileNotFoundError as exc:
            raise SlurmQueryError(argv, "", f"not found ({argv[0]} is not installed or not on PATH)") from exc
        except OSError as exc:
            raise SlurmQueryError(argv, "", f"could not start: {exc}") from exc
        stdout = (
            proc.stdout if isinstance(proc.stdout, str) else (proc.stdout or b"").decode(errors="replace")
        )
        stderr = (
            proc.stderr if isinstance(proc.stderr, str) else (proc.stderr or b"").decode(errors="replace")
        )
        if proc.returncode != 0:
            raise SlurmQueryError(argv, stderr, f"exited {proc.returncode}", proc.returncode)
        return stdout

    def _run_json(self, args: Sequence[str]) -> str:
        """``_run`` for a --json query, which exits 0 even when slurmctld could not be reached."""
        stdout = self._run(args)
        errors = json_errors(stdout)
        if errors:
            raise SlurmQueryError(list(args), "; ".join(errors), "reported errors", 0)
        return stdout

    # Queries -----------------------------------------------------------------

    def nodes(self) -> Parsed[NodeState]:
        return parse_sinfo_nodes(self._run(SINFO_NODES_ARGS))

    def reservations(self) -> Parsed[Reservation]:
        return parse_reservations(self._run(RESERVATIONS_ARGS))

    def running_jobs(self) -> Parsed[RunningJob]:
        return parse_squeue_running(self._run(SQUEUE_RUNNING_ARGS))

    def node_gres(self) -> Parsed[NodeGres]:
        """Every node's configured and allocated GPUs, one entry per node.

        Slurm 22.05's ``sinfo --json`` lists the nodes. From 23.02 it prints records that group nodes,
        which cannot tell each node's GPUs, and ``scontrol show nodes --json`` (which 22.05 lacks) lists
        them. So this asks sinfo, and once sinfo answers grouped, asks scontrol then and from then on
        (``node_gres_args``). Chosen by the answer's shape rather than by a version number: the reader
        can then only ever be given the per-node list it reads, on any packaging's version string, with no
        extra call on 22.05; the cost on newer Slurm is one sinfo call per client.
        """
        if self.node_gres_args == SINFO_JSON_ARGS:
            text = self._run_json(SINFO_JSON_ARGS)
            if not sinfo_json_grouped(text):
                return parse_nodes_gres_json(text)
            self.node_gres_args = NODES_JSON_ARGS
        return parse_nodes_gres_json(self._run_json(self.node_gres_args))

    def job_gpus(self) -> Parsed[JobGpus]:
        """The GPUs each job that may hold resources has on each of its nodes (``squeue --json``)."""
        return parse_squeue_gpus_json(self._run_json(SQUEUE_JSON_ARGS))

    def queue(self) -> Parsed[QueuedJob]:
        """Every job slurmctld lists, with its partition, state and restarts (``squeue --json``)."""
        return parse_squeue_queue_json(self._run_json(SQUEUE_JSON_ARGS))

    def live_batch_jobs(self, job_ids: Sequence[str]) -> set[str]:
        """Which of ``job_ids`` have a batch step some node's slurmd is running (``sstat``).

        sstat asks each job's node for the step, so a job slurmctld counts as running that no node
        runs (a *phantom*, left by a controller restored from an older state) is missing from it.
        """
        for job in job_ids:
            if not job.isdigit():
                raise ValueError(f"job id must be digits, got {job!r}")
        if not job_ids:
            return set()
        return parse_sstat_job_ids(self._run([*SSTAT_BATCH_ARGS, ",".join(f"{j}.batch" for j in job_ids)]))

    def hostnames(self, nodelist: str) -> list[str]:
        """A hostlist expression (``gpu-[1-2]``) expanded by ``scontrol show hostnames``."""
        if not nodelist.strip():
            raise ValueError("empty node list: pass a hostlist expression such as gpu-[1-2]")
        return self._run(["scontrol", "show", "hostnames", nodelist]).split()

    def live_jobs(self, name: str) -> list[LiveJob]:
        """The jobs named ``name`` that are live (``jobs.ATTACHABLE_STATES``), oldest first."""
        return parse_squeue_jobs(self._run(squeue_by_name_args(name)))

    # Changes -----------------------------------------------------------------

    def submit(self, argv: Sequence[str]) -> str:
        """Run a prepared ``sbatch --parsable`` call; return the job id it printed."""
        check_sbatch_args(argv)
        return parse_sbatch_job_id(self._run(argv))

    def cancel(self, job_id: str | None = None, *, name: str | None = None) -> None:
        """``scancel`` one job by id, or every job named ``name``."""
        self._run(scancel_args(job_id, name=name))

    def drain(self, node: str, reason: str) -> None:
        _check_name(node, "node")
        if not reason.strip() or "\n" in reason or "\r" in reason:
            # sinfo prints one line per node; a newline would break every later parse.
            raise ValueError(f"drain reason must be one non-empty line, got {reason!r}")
        self._run(["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"])

    def resume(self, node: str) -> None:
        _check_name(node, "node")
        self._run(["scontrol", "update", f"NodeName={node}", "State=RESUME"])

    def set_comment(self, node: str, comment: str) -> None:
        _check_name(node, "node name")
        if not comment or any(c.isspace() for c in comment):
            raise ValueError(f"node comment must be one non-empty token, got {comment!r}")
        self._run(["scontrol", "update", f"NodeName={node}", f"Comment={comment}"])

    def requeue(self, job_id: str) -> None:
        """``scontrol requeue <job>``: the job goes back to the queue and its nodes are released."""
        if not job_id.isdigit():
            raise ValueError(f"job id must be digits, got {job_id!r}")
        self._run(["scontrol", "requeue", job_id])

    def reconfigure(self) -> None:
        """``scontrol reconfigure``: slurmctld rebuilds every node's CPU, memory and GRES allocation
        from the jobs it runs (Slurm 22.05: read_slurm_conf -> select_g_reconfigure -> cons_common
        select_p_reconfigure: gres_node_state_dealloc_all on every node, then job_res_add_job for
        each running and suspended job). Running jobs are not signalled. It also re-reads
        slurm.conf and gres.conf, and resets partition states set with scontrol unless
        ReconfigFlags=KeepPartState; docs/resilience.md says when the sweeper uses it."""
        self._run(["scontrol", "reconfigure"])

    def show_nodes(self) -> str:
        """``scontrol show node --oneliner``: one line per node, every field."""
        return self._run(["scontrol", "show", "node", "--oneliner"])

    def delete_reservation(self, name: str) -> None:
        _check_name(name, "reservation")
        self._run(["scontrol", "delete", f"ReservationName={name}"])


def _check_name(name: str, what: str) -> None:
    if not _NAME.fullmatch(name):
        raise ValueError(f"refusing {what} name {name!r}: expected one plain name")
