"""Episode files read by the stock TypeScript MCAP reader (@mcap/core's McapIndexedReader).

Foxglove and other web tools read MCAP with @mcap/core, so the files megahour writes (the raw
recording and the transcoded container, with its mix of uncompressed video chunks and zstd data
chunks) must open there without megahour's own reader. The npm packages are pinned in
tests/episodes/ts/package-lock.json and installed with ``npm ci`` into ``.cache/ts-mcap`` at the
repository root (ignored by git); the install is reused while the lock file is unchanged.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from megahour.episodes.model import Recording
from megahour.episodes.transcode import transcode

ROOT = Path(__file__).resolve().parents[2]
TS_DIR = Path(__file__).resolve().parent / "ts"
SCRIPT = TS_DIR / "read_mcap.mjs"
CACHE = ROOT / ".cache" / "ts-mcap"
STAMP = ".megahour-installed"  # written after a successful `npm ci`: the sha256 of the lock it installed
NPM_TIMEOUT_S = 300
NODE_TIMEOUT_S = 60
NODE_MIN_MAJOR = 18


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed; install nodejs to check @mcap/core compatibility")
    version = subprocess.run(
        [node, "--version"], capture_output=True, text=True, timeout=NODE_TIMEOUT_S, check=True
    ).stdout.strip()
    major = int(version.lstrip("v").split(".")[0])
    if major < NODE_MIN_MAJOR:
        pytest.skip(f"node {version} is too old for @mcap/core; install nodejs >= {NODE_MIN_MAJOR}")
    return node


def _installed(lock: bytes) -> bool:
    """True when .cache/ts-mcap holds a finished `npm ci` of exactly this lock file."""
    digest = hashlib.sha256(lock).hexdigest()
    cached_lock = CACHE / "package-lock.json"
    stamp = CACHE / STAMP
    return (
        cached_lock.is_file()
        and cached_lock.read_bytes() == lock
        and stamp.is_file()
        and stamp.read_text().strip() == digest
        and (CACHE / "node_modules" / "@mcap" / "core" / "package.json").is_file()
        and (CACHE / "node_modules" / "fzstd" / "package.json").is_file()
    )


@pytest.fixture(scope="session")
def ts_reader() -> Iterator[tuple[str, Path]]:
    """(node, folder of node_modules): installs the pinned packages when the lock file changed."""
    node = _node()
    lock = (TS_DIR / "package-lock.json").read_bytes()
    CACHE.mkdir(parents=True, exist_ok=True)
    # Serialise installs: two pytest processes (xdist, or two checkouts' runs) must not `npm ci` at once.
    with open(CACHE / ".install.lock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        if not _installed(lock):
            npm = shutil.which("npm")
            if npm is None:
                pytest.skip(
                    "npm is not installed; install npm to fetch @mcap/core for the compatibility check"
                )
            (CACHE / STAMP).unlink(missing_ok=True)
            shutil.copyfile(TS_DIR / "package.json", CACHE / "package.json")
            shutil.copyfile(TS_DIR / "package-lock.json", CACHE / "package-lock.json")
            try:
                done = subprocess.run(
                    [npm, "ci", "--prefix", str(CACHE), "--no-audit", "--no-fund", "--ignore-scripts"],
                    cwd=CACHE,
                    capture_output=True,
                    text=True,
                    timeout=NPM_TIMEOUT_S,
                )
            except subprocess.TimeoutExpired:
                pytest.fail(f"npm ci into {CACHE} took longer than {NPM_TIMEOUT_S} s")
            if done.returncode != 0:
                output = done.stdout + done.stderr
                pytest.fail(f"npm ci into {CACHE} failed (exit {done.returncode}):\n{output}")
            (CACHE / STAMP).write_text(hashlib.sha256(lock).hexdigest() + "\n")
        fcntl.flock(guard, fcntl.LOCK_UN)
    yield node, CACHE


def read_with_ts(ts_reader: tuple[str, Path], path: Path) -> dict:
    node, modules = ts_reader
    env = {**os.environ, "MEGAHOUR_TS_MCAP_MODULES": str(modules)}
    try:
        done = subprocess.run(
            [node, str(SCRIPT), str(path)],
            capture_output=True,
            text=True,
            timeout=NODE_TIMEOUT_S,
            env=env,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"@mcap/core took longer than {NODE_TIMEOUT_S} s to read {path}")
    assert done.returncode == 0, f"@mcap/core could not read {path}:\n{done.stderr}{done.stdout}"
    return json.loads(done.stdout)


def test_raw_and_transcoded_episodes_read_with_mcap_core(
    ts_reader: tuple[str, Path],
    raw_episode: tuple[Path, Recording, dict[str, np.ndarray]],
    tmp_path: Path,
) -> None:
    raw_path, recording, _ = raw_episode
    ours_path = tmp_path / "ours.mcap"
    transcode(raw_path, ours_path)
    expected = {topic: len(msgs) for topic, msgs in recording.messages.items()}
    cameras = [topic for topic, spec in recording.topics.items() if spec.kind == "image"]
    assert cameras

    raw = read_with_ts(ts_reader, raw_path)
    ours = read_with_ts(ts_reader, ours_path)

    assert raw["topics"] == expected
    assert ours["topics"] == expected
    for topic in cameras:
        assert raw["schemas"][topic] == "foxglove.CompressedImage"
        assert ours["schemas"][topic] == "foxglove.CompressedVideo"
    # Video chunks are stored uncompressed and data chunks with zstd; the reader must handle both.
    assert {"", "zstd"} <= set(ours["compressions"])
    assert ours["chunks"] > 1
    assert {"megahour.layout", "megahour.keyframes"} <= set(ours["metadata"])
