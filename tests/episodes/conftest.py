"""Fixtures for the episode tests: a small synthetic episode written in the raw per-topic form, and the
stock TypeScript MCAP library (@mcap/core) for the scripts in ts/.

The npm packages are pinned in tests/episodes/ts/package-lock.json and installed with ``npm ci`` into
``.cache/ts-mcap`` at the repository root (ignored by git); the install is reused while the lock file is
unchanged.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from megahour.episodes import mcapio
from megahour.episodes.model import Recording
from megahour.episodes.synthetic import synthetic_recording


@pytest.fixture(scope="session")
def raw_episode(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Recording, dict[str, np.ndarray]]:
    recording, sources = synthetic_recording(5.0)
    path = tmp_path_factory.mktemp("episodes") / "raw.mcap"
    # Small chunks so that per-topic reads cross chunk boundaries, as they do in real recordings.
    mcapio.write_raw(recording, path, chunk_bytes=64 * 1024)
    return path, recording, sources


ROOT = Path(__file__).resolve().parents[2]
TS_DIR = Path(__file__).resolve().parent / "ts"
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


def run_ts_script(
    ts_reader: tuple[str, Path], script: str, *args: str, timeout: float = NODE_TIMEOUT_S
) -> str:
    """Run ``ts/<script>`` with node against the pinned packages; its stdout (fails the test on exit != 0)."""
    node, modules = ts_reader
    env = {**os.environ, "MEGAHOUR_TS_MCAP_MODULES": str(modules)}
    try:
        done = subprocess.run(
            [node, str(TS_DIR / script), *args], capture_output=True, text=True, timeout=timeout, env=env
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"node {script} took longer than {timeout} s")
    assert done.returncode == 0, f"node {script} {' '.join(args)} failed:\n{done.stderr}{done.stdout}"
    return done.stdout
