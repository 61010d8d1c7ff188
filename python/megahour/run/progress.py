"""Which checkpoint is the newest complete one, so the runner can tell that training progressed.

A checkpoint counts only once its writer has dropped the ``.complete`` marker inside it: writers
create the marker last (atomically), so a directory without it may be half-written by a step
that crashed mid-save, and treating it as progress would reset the restart budget for nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from megahour.job_contract import CHECKPOINT_DIR_ENV, COMPLETE_MARKER


@dataclass(frozen=True)
class CheckpointEntry:
    name: str
    has_marker: bool
    mtime_ns: int  # of the marker: when the checkpoint became complete


def latest_complete(entries: Iterable[CheckpointEntry]) -> str | None:
    """Identifier of the newest complete checkpoint, or None when there is none.

    The identifier carries the marker's mtime as well as the name, so a checkpoint rewritten in
    place under a fixed name (``last/``) still shows up as new.
    """
    complete = [e for e in entries if e.has_marker]
    if not complete:
        return None
    newest = max(complete, key=lambda e: (e.mtime_ns, e.name))
    return f"{newest.name}@{newest.mtime_ns}"


def scan(directory: Path) -> list[CheckpointEntry]:
    entries = []
    with os.scandir(directory) as it:
        for entry in it:
            if not entry.is_dir():
                continue
            try:
                mtime_ns = os.stat(Path(entry.path) / COMPLETE_MARKER).st_mtime_ns
            except FileNotFoundError:
                entries.append(CheckpointEntry(entry.name, False, 0))
            else:
                entries.append(CheckpointEntry(entry.name, True, mtime_ns))
    return entries


def latest_checkpoint(directory: Path | None) -> str | None:
    """The newest complete checkpoint in ``directory``; None when unset, missing or unreadable.

    Unreadable is not an error: checkpoint tracking only refines the restart budget, and a flaky
    filesystem must not turn into a crash of the wrapper.
    """
    if directory is None:
        return None
    try:
        return latest_complete(scan(directory))
    except OSError:
        return None


def resolve_checkpoint_dir(cli_value: str | os.PathLike[str] | None, env: Mapping[str, str]) -> Path | None:
    value = cli_value if cli_value else env.get(CHECKPOINT_DIR_ENV)
    return Path(value) if value else None
