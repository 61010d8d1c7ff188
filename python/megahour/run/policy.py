"""Pure restart policy: classify a step's exit status and decide restart, requeue or stop.

Nothing here spawns a process or touches a file, so every rule is unit- and property-tested.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from megahour.job_contract import PEER_LOST_EXIT

Classification = Literal["success", "transient", "app_error"]
Action = Literal["exit_success", "restart", "requeue", "app_error", "interrupted"]

# Why a killed or crashed process counts as transient: on a GPU cluster the usual killers are
# infrastructure, not the training code, and a restart from the last checkpoint fixes them.
#   SIGKILL (9):  the kernel OOM killer, cgroup memory limits, or a watchdog's hard kill.
#   SIGTERM (15): preemption, a node draining, or a supervisor (torchrun) tearing the group down.
#   SIGABRT (6):  NCCL's watchdog aborting a hung collective (a peer or the fabric failed).
#   SIGSEGV (11): driver/NCCL/Xid faults after a GPU or link error surface as segfaults.
# A shell reports a signal-killed child as 128+N; Python's subprocess reports it as -N.
# PEER_LOST_EXIT: a rank whose collective failed because another rank died (job_contract); the peer's
# death is the failure, and the step restarts as a whole.
_TRANSIENT_SIGNALS = (signal.SIGKILL, signal.SIGTERM, signal.SIGABRT, signal.SIGSEGV)
DEFAULT_TRANSIENT_EXIT_CODES: frozenset[int] = frozenset(
    {128 + int(s) for s in _TRANSIENT_SIGNALS} | {-int(s) for s in _TRANSIENT_SIGNALS} | {PEER_LOST_EXIT}
)

# The conventional status of a process stopped by Ctrl-C; never listed in RequeueExit.
INTERRUPTED_EXIT = 128 + int(signal.SIGINT)


@dataclass(frozen=True)
class ExitContract:
    """The exit codes `megahour run` promises to Slurm.

    ``requeue_exit`` must be the value rendered into slurm.conf ``RequeueExit``: it means "the
    infrastructure failed past the restart budget, run this job again". ``app_error_exit`` must
    not be listed there: the code is broken and requeueing would burn GPU hours repeating it.
    """

    requeue_exit: int = 85
    app_error_exit: int = 86
    transient_exit_codes: frozenset[int] = DEFAULT_TRANSIENT_EXIT_CODES

    def __post_init__(self) -> None:
        # 0 means success to Slurm and >255 is truncated by the kernel, so both would lie.
        for flag, code in (("--requeue-exit", self.requeue_exit), ("--app-error-exit", self.app_error_exit)):
            if not 1 <= code <= 255:
                raise ValueError(f"{flag}={code}: pass an exit code between 1 and 255")
        if self.requeue_exit == self.app_error_exit:
            raise ValueError(
                f"--requeue-exit and --app-error-exit are both {self.requeue_exit}: application "
                "errors would be requeued forever; pass two different codes"
            )


def classify(returncode: int, contract: ExitContract) -> Classification:
    if returncode == 0:
        return "success"
    if returncode in contract.transient_exit_codes:
        return "transient"
    return "app_error"


@dataclass(frozen=True)
class Decision:
    action: Action
    exit_code: int  # what `megahour run` exits with; meaningless for "restart"
    restarts_used: int  # in-place restarts since the last checkpoint advance, this one included
    reason: str


@dataclass(frozen=True)
class BudgetState:
    restarts_used: int = 0
    last_checkpoint: str | None = None

    def after(self, decision: Decision, current_checkpoint: str | None) -> BudgetState:
        # A checkpoint that cannot be seen right now (None: scan failed, dir unmounted) must not
        # erase the one we knew, or its reappearance would look like progress and reset the budget.
        return BudgetState(decision.restarts_used, current_checkpoint or self.last_checkpoint)


def checkpoint_advanced(previous: str | None, current: str | None) -> bool:
    return current is not None and current != previous


@dataclass
class RetryBudget:
    max_restarts: int = 3
    contract: ExitContract = field(default_factory=ExitContract)

    def __post_init__(self) -> None:
        if self.max_restarts < 0:
            raise ValueError(f"--max-restarts={self.max_restarts}: pass 0 or more")

    def decide(self, state: BudgetState, returncode: int, checkpoint_advanced: bool) -> Decision:
        kind = classify(returncode, self.contract)
        if kind == "success":
            return Decision("exit_success", 0, state.restarts_used, "step succeeded")
        if kind == "app_error":
            return Decision(
                "app_error",
                self.contract.app_error_exit,
                state.restarts_used,
                f"exit status {returncode} is an application error; not restarting or requeueing",
            )
        used = 0 if checkpoint_advanced else state.restarts_used
        note = " (new checkpoint landed, budget reset)" if checkpoint_advanced and state.restarts_used else ""
        if used < self.max_restarts:
            return Decision(
                "restart",
                returncode,
                used + 1,
                f"transient exit status {returncode}; restart {used + 1}/{self.max_restarts} in place{note}",
            )
        return Decision(
            "requeue",
            self.contract.requeue_exit,
            used,
            f"transient exit status {returncode} after {used}/{self.max_restarts} restarts without a "
            f"new checkpoint; exiting {self.contract.requeue_exit} so Slurm requeues the job{note}",
        )

    def requeue_instead(self, decision: Decision, why: str) -> Decision:
        """A restart in place turned into a requeue: the allocation itself is unfit (a drained node)."""
        if decision.action != "restart":
            return decision
        return Decision(
            "requeue",
            self.contract.requeue_exit,
            decision.restarts_used - 1,
            f"{why}; not restarting in place, exiting {self.contract.requeue_exit} so Slurm requeues "
            "the job onto healthy nodes",
        )

    def on_signal(self, state: BudgetState, signum: int, returncode: int | None) -> Decision:
        """We ourselves were told to stop; restarting would fight the sender.

        ``returncode`` is None when the signal came between attempts and no step was running.
        """
        step = "no step running" if returncode is None else f"step exit status {returncode}"
        if signum == signal.SIGTERM:
            # Slurm sends SIGTERM before preempting or requeueing a job. Even a clean child exit
            # (it saved and stopped) means unfinished work, so ask Slurm to run the job again.
            return Decision(
                "requeue",
                self.contract.requeue_exit,
                state.restarts_used,
                f"received SIGTERM ({step}); exiting {self.contract.requeue_exit} so Slurm requeues the job",
            )
        # SIGINT is a person pressing Ctrl-C: stop, and do not let Slurm requeue.
        name = signal.Signals(signum).name
        return Decision(
            "interrupted",
            INTERRUPTED_EXIT,
            state.restarts_used,
            f"received {name} ({step}); stopping, no requeue",
        )


def slurm_restart_count(env: Mapping[str, str]) -> int:
    """How many times Slurm has requeued this job (``SLURM_RESTART_COUNT``); 0 when unknown."""
    try:
        return max(0, int(env.get("SLURM_RESTART_COUNT", "").strip()))
    except ValueError:
        return 0
