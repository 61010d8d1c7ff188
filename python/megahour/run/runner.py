"""The process loop: run the step, tee its output, record the attempt, restart or exit.

All decisions come from ``policy``; this module only does what they say, plus the two things
that cannot be pure: signals and child processes.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from megahour.job_contract import RUN_RESTART_ENV
from megahour.run.logtail import LogTail
from megahour.run.policy import (
    BudgetState,
    ExitContract,
    RetryBudget,
    checkpoint_advanced,
    classify,
    slurm_restart_count,
)
from megahour.run.progress import latest_checkpoint
from megahour.run.traces import AttemptRecord, job_id, write_attempt

TAIL_LINES = 200
# Signals passed on to the step. TERM/INT also stop the restart loop; USR1/USR2 are what
# `srun --signal=USR1@<secs>` sends before a time limit so the step can checkpoint in time.
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# The shell's statuses for "command not found" and "not executable", for a step that cannot start.
_SPAWN_FAILED = {FileNotFoundError: 127, PermissionError: 126}
# After the step exits, how long to keep reading output that a leftover background process
# (which inherited the pipe) may still write, before moving on without it.
DRAIN_AFTER_EXIT_S = 2.0

Log = Callable[[str], None]


@dataclass(frozen=True)
class RunConfig:
    command: tuple[str, ...]
    trace_root: Path
    checkpoint_dir: Path | None = None
    max_restarts: int = 3
    contract: ExitContract = field(default_factory=ExitContract)
    tail_lines: int = TAIL_LINES
    # Asked before every restart in place: a reason the allocation is unfit (a drained node), or None.
    # A reason turns the restart into a requeue, so the step never restarts onto a failing node.
    allocation_check: Callable[[], str | None] | None = None


@dataclass
class _Signals:
    """Signals we received, forwarded to the step while one runs."""

    child: subprocess.Popen[bytes] | None = None
    stop: int | None = None  # the first SIGTERM/SIGINT received
    pending: list[int] = field(default_factory=list)  # arrived while no step was running

    def handle(self, signum: int, _frame: object) -> None:
        if signum in STOP_SIGNALS and self.stop is None:
            self.stop = signum
        if self.child is None:
            self.pending.append(signum)
        else:
            _send(self.child, signum)

    def attach(self, child: subprocess.Popen[bytes]) -> None:
        self.child = child
        # A signal that landed while Popen was starting the step is still the step's business.
        while self.pending:
            _send(child, self.pending.pop(0))

    def detach(self) -> None:
        self.child = None
        self.pending.clear()


def _send(child: subprocess.Popen[bytes], signum: int) -> None:
    if child.poll() is None:
        # ProcessLookupError: it exited between poll() and kill(), nothing left to tell.
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)


def run(
    config: RunConfig,
    *,
    env: Mapping[str, str] | None = None,
    sink: BinaryIO | None = None,
    log: Log | None = None,
) -> int:
    """Run ``config.command`` until it succeeds or the policy says stop; return our exit code.

    Installs handlers for ``FORWARDED_SIGNALS`` (so it must run in the main thread) and restores
    the previous ones on return.
    """
    env = dict(os.environ if env is None else env)
    sink = sink if sink is not None else sys.stdout.buffer
    log = log or _log_stderr
    budget = RetryBudget(config.max_restarts, config.contract)
    job_dir = config.trace_root / job_id(env, os.getpid())
    signals = _Signals()
    previous = {s: signal.signal(s, signals.handle) for s in FORWARDED_SIGNALS}
    try:
        # A checkpoint that already exists (from an earlier Slurm attempt) is not progress.
        state = BudgetState(last_checkpoint=latest_checkpoint(config.checkpoint_dir))
        local_restart = 0
        while True:
            if signals.stop is not None:
                # Told to stop between attempts (while a trace was written): start no new one.
                decision = budget.on_signal(state, signals.stop, None)
                log(f"{decision.action}: {decision.reason}")
                return decision.exit_code
            started = _now()
            env[RUN_RESTART_ENV] = str(local_restart)
            returncode, tail = _run_once(config.command, env, sink, config.tail_lines, signals)
            ended = _now()
            current = latest_checkpoint(config.checkpoint_dir)
            stop = signals.stop
            if stop is not None:
                decision = budget.on_signal(state, stop, returncode)
            else:
                decision = budget.decide(
                    state, returncode, checkpoint_advanced(state.last_checkpoint, current)
                )
                if decision.action == "restart" and config.allocation_check is not None:
                    unfit = config.allocation_check()
                    if unfit is not None:
                        decision = budget.requeue_instead(decision, unfit)
            record = AttemptRecord(
                job_id=job_dir.name,
                command=config.command,
                slurm_restart_count=slurm_restart_count(env),
                local_restart=local_restart,
                slurm_procid=env.get("SLURM_PROCID"),
                hostname=socket.gethostname(),
                started_at=started,
                ended_at=ended,
                returncode=returncode,
                classification=classify(returncode, config.contract),
                decision=decision,
                checkpoint=current,
                signal=signal.Signals(stop).name if stop is not None else None,
            )
            where = _record(job_dir, record, env, tail.lines(), log)
            log(f"{decision.action}: {decision.reason}{where}")
            if decision.action != "restart":
                return decision.exit_code
            state = state.after(decision, current)
            local_restart += 1
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _run_once(
    command: Sequence[str], env: Mapping[str, str], sink: BinaryIO, tail_lines: int, signals: _Signals
) -> tuple[int, LogTail]:
    tail = LogTail(tail_lines)
    try:
        # A new session: a terminal's Ctrl-C reaches only us and we forward it once, instead of
        # the step getting it twice (from the terminal and from us).
        child = subprocess.Popen(
            list(command),
            env=dict(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as exc:
        message = f"megahour run: cannot start {command[0]!r}: {exc.strerror or exc}\n".encode()
        tail.feed(message)
        sink.write(message)
        sink.flush()
        return _SPAWN_FAILED.get(type(exc), 127), tail
    signals.attach(child)
    try:
        assert child.stdout is not None
        _tee(child, child.stdout.fileno(), sink, tail)
        return child.wait(), tail
    finally:
        signals.detach()
        if child.poll() is None:  # unwinding on an exception: leave no orphaned step behind
            child.kill()
            child.wait()
        if child.stdout is not None:
            child.stdout.close()


def _tee(child: subprocess.Popen[bytes], fd: int, sink: BinaryIO, tail: LogTail) -> None:
    """Copy the step's output to ``sink`` and ``tail`` until the pipe closes or the step is gone.

    Chunks, not lines: a progress bar redrawn with \\r must show up live, not at the next \\n.
    The pipe alone is not enough to know the step ended: a background process it left behind
    holds the pipe open, and waiting for that would pin the job's GPUs until its time limit.
    """
    drain_until: float | None = None
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            if selector.select(timeout=0.2):
                chunk = os.read(fd, 65536)
                if not chunk:
                    return
                sink.write(chunk)
                sink.flush()
                tail.feed(chunk)
            elif drain_until is not None:
                return  # the step is gone and the pipe went quiet
            if drain_until is None and child.poll() is not None:
                drain_until = time.monotonic() + DRAIN_AFTER_EXIT_S
            if drain_until is not None and time.monotonic() > drain_until:
                return


def _record(job_dir: Path, record: AttemptRecord, env: Mapping[str, str], tail: list[str], log: Log) -> str:
    # Diagnostics must never turn a recoverable failure into a crash of the wrapper.
    try:
        return f" (trace: {write_attempt(job_dir, record, env, tail)})"
    except OSError as exc:
        log(f"warning: could not write the attempt trace under {job_dir}: {exc}")
        return ""


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _log_stderr(message: str) -> None:
    print(f"megahour run: {message}", file=sys.stderr, flush=True)
