"""Attempt directories: ``<trace_root>/<jobid>/attempt-<k>/`` with what is needed to debug a failure.

Each directory is built under a hidden temporary name and renamed into place (``atomicio.publish``),
so a reader (or the next attempt counting directories) never sees a half-written one, and a wrapper
killed mid-write leaves only a ``.attempt-*.tmp-*`` directory that no one mistakes for an attempt.
Every file and rename is fsynced: the traces matter most when the node is about to crash or be
rebooted.

A trace holds what the job's environment, command and output held, so it is private to the job's user
(files 0600 in a 0700 directory; root's sweeper and doctor read them) and credentials are redacted before
anything is written (``megahour.redact``): secret-named variables whole, and passwords in URLs, signed
query parameters and known token shapes wherever they stand, in the environment, the command and the log
tail.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from megahour import atomicio, redact
from megahour.job_contract import attempt_dir_name, next_attempt_index
from megahour.run.policy import Decision

DEFAULT_TRACE_ROOT = Path("/var/lib/megahour/traces")
TRACE_ROOT_ENV = "MEGAHOUR_TRACE_ROOT"
HEALTH_VERDICTS_ENV = "MEGAHOUR_HEALTH_VERDICTS"
REDACTED = redact.REDACTED
# Attempt files: the job's user alone (and root).
TRACE_FILE_MODE = 0o600
TRACE_DIR_MODE = 0o700


@dataclass(frozen=True)
class AttemptRecord:
    """What one attempt did; becomes ``meta.json`` (plus the index chosen at write time)."""

    job_id: str
    command: tuple[str, ...]
    slurm_restart_count: int
    local_restart: int
    slurm_procid: str | None
    hostname: str
    started_at: str  # UTC, ISO 8601
    ended_at: str
    returncode: int
    classification: str
    decision: Decision
    checkpoint: str | None  # newest complete checkpoint after the attempt
    signal: str | None  # the signal that stopped the wrapper itself, if any

    def to_meta(self, attempt: int) -> dict[str, object]:
        meta = {"attempt": attempt, **asdict(self)}
        meta["command"] = redact.redact_argv(self.command)
        return meta


def resolve_trace_root(cli_value: str | os.PathLike[str] | None, env: Mapping[str, str]) -> Path:
    value = cli_value if cli_value else env.get(TRACE_ROOT_ENV)
    return Path(value) if value else DEFAULT_TRACE_ROOT


def job_id(env: Mapping[str, str], pid: int) -> str:
    # Outside Slurm the pid keeps concurrent ad-hoc runs apart.
    value = env.get("SLURM_JOB_ID", "").strip()
    return value if value else f"nojob-{pid}"


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    return redact.redact_env(env)


def write_attempt(
    job_dir: Path,
    record: AttemptRecord,
    env: Mapping[str, str],
    log_tail: Sequence[str],
    *,
    pid: int | None = None,
) -> Path:
    """Write the attempt directory and return its final path.

    The index is the next free ``attempt-<k>`` under ``job_dir``; when another writer takes it
    between our listing and our rename, we renumber and try again.
    """
    pid = os.getpid() if pid is None else pid
    job_dir.mkdir(parents=True, exist_ok=True)
    index = next_attempt_index(os.listdir(job_dir))
    tmp = job_dir / f".{attempt_dir_name(index)}.tmp-{pid}"
    shutil.rmtree(tmp, ignore_errors=True)  # leftovers of an earlier wrapper with our pid
    tmp.mkdir(mode=TRACE_DIR_MODE)
    os.chmod(tmp, TRACE_DIR_MODE)  # mkdir's mode is masked by the umask; this one must hold exactly

    def write(path: Path, text: str) -> None:
        atomicio.atomic_write_text(path, text, TRACE_FILE_MODE)

    try:
        write(tmp / "env.json", json.dumps(redact_env(env), indent=2, sort_keys=True) + "\n")
        # Redacted whole, not line by line: a PEM key printed across lines is one block.
        write(tmp / "log-tail.txt", redact.redact_text("".join(line + "\n" for line in log_tail)))
        health = _read_health(env.get(HEALTH_VERDICTS_ENV))
        if health is not None:
            write(tmp / "health.json", health)
        while True:
            write(tmp / "meta.json", json.dumps(record.to_meta(index), indent=2) + "\n")
            final = job_dir / attempt_dir_name(index)
            try:
                atomicio.publish(tmp, final)
            except OSError as exc:
                # rename(2) onto an existing non-empty directory fails with one of these; attempt
                # directories are never empty, so this means another writer took the index.
                if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
                index = max(index + 1, next_attempt_index(os.listdir(job_dir)))
                continue
            return final
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _read_health(path: str | None) -> str | None:
    if not path:
        return None
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return None  # no readable verdicts on this node: the rest of the trace still matters
