from __future__ import annotations

import os
from pathlib import Path

from megahour.job_contract import COMPLETE_MARKER
from megahour.run.progress import (
    CheckpointEntry,
    latest_checkpoint,
    latest_complete,
    resolve_checkpoint_dir,
)


def test_newest_complete_wins_and_incomplete_ones_are_ignored():
    entries = [
        CheckpointEntry("step-100", True, 100),
        CheckpointEntry("step-300", False, 0),  # still being written
        CheckpointEntry("step-200", True, 200),
    ]
    assert latest_complete(entries) == "step-200@200"


def test_no_complete_checkpoint_is_none():
    assert latest_complete([]) is None
    assert latest_complete([CheckpointEntry("step-1", False, 0)]) is None


def test_equal_mtimes_break_ties_by_name_so_repeated_scans_agree():
    entries = [CheckpointEntry("b", True, 5), CheckpointEntry("a", True, 5)]
    assert latest_complete(entries) == latest_complete(list(reversed(entries))) == "b@5"


def _checkpoint(root: Path, name: str, mtime_ns: int | None) -> Path:
    path = root / name
    path.mkdir(parents=True)
    (path / "model.pt").write_text("weights")
    if mtime_ns is not None:
        marker = path / COMPLETE_MARKER
        marker.touch()
        os.utime(marker, ns=(mtime_ns, mtime_ns))
    return path


def test_scans_a_directory(tmp_path):
    _checkpoint(tmp_path, "step-1", 1_000_000_000)
    _checkpoint(tmp_path, "step-2", 2_000_000_000)
    _checkpoint(tmp_path, "step-3", None)
    (tmp_path / "stray-file").write_text("not a checkpoint")
    assert latest_checkpoint(tmp_path) == "step-2@2000000000"


def test_a_checkpoint_rewritten_in_place_counts_as_new(tmp_path):
    last = _checkpoint(tmp_path, "last", 1_000_000_000)
    before = latest_checkpoint(tmp_path)
    os.utime(last / COMPLETE_MARKER, ns=(3_000_000_000, 3_000_000_000))
    assert latest_checkpoint(tmp_path) != before


def test_missing_or_unset_directory_is_none(tmp_path):
    assert latest_checkpoint(None) is None
    assert latest_checkpoint(tmp_path / "absent") is None
    assert latest_checkpoint(tmp_path) is None


def test_flag_beats_environment(tmp_path):
    env = {"MEGAHOUR_CHECKPOINT_DIR": "/from/env"}
    assert resolve_checkpoint_dir(str(tmp_path), env) == tmp_path
    assert resolve_checkpoint_dir(None, env) == Path("/from/env")
    assert resolve_checkpoint_dir(None, {}) is None
    assert resolve_checkpoint_dir(None, {"MEGAHOUR_CHECKPOINT_DIR": ""}) is None
