"""The example in docs/training.md runs as written: a lab's own torchrun script on megahour's public API.

The script is cut out of the doc (the ```python block after the ``own-torchrun-example`` marker) and run
under real ``torchrun`` with 2 CPU ranks: once from scratch, then again with more steps, which must
resume from its checkpoint; and once reading a manifest through the cache road.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "training.md"
MARKER = "<!-- own-torchrun-example -->"


def example_script() -> str:
    text = DOC.read_text()
    assert MARKER in text, f"{DOC} lost its {MARKER} marker"
    match = re.search(r"```python\n(.*?)```", text[text.index(MARKER) :], re.S)
    assert match, f"no ```python block after {MARKER} in {DOC}"
    return match.group(1)


def _descendants(root: int) -> list[int]:
    """``root`` and every process below it, parents first (from /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            pid, rest = stat.read_text().split(" (", 1)
            children.setdefault(int(rest.rsplit(") ", 1)[1].split()[1]), []).append(int(pid))
    tree = [root]
    for pid in tree:
        tree.extend(children.get(pid, []))
    return tree


def _signal(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _torchrun(script: Path, *args: str, timeout: float = 240) -> str:
    # faulthandler: a rank that hangs is sent SIGABRT on timeout and prints every thread's stack.
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", PYTHONFAULTHANDLER="1")
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    run = subprocess.Popen(
        [*launcher, str(script), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = run.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # torchrun starts each rank in a session of its own: signal the whole tree, not a group.
        tree = _descendants(run.pid)
        _signal(tree, signal.SIGABRT)
        time.sleep(10)  # the stacks are printed at once; whatever ignored the signal is killed
        _signal(tree, signal.SIGKILL)
        stdout, stderr = run.communicate()
        pytest.fail(
            f"torchrun {' '.join(args)} ran past {timeout} s; stdout: {stdout[-2000:]}\n"
            f"the stacks at SIGABRT:\n{stderr[-12000:]}"
        )
    assert run.returncode == 0, stderr[-4000:]
    return stdout


def test_the_documented_example_trains_and_resumes(tmp_path) -> None:
    script = tmp_path / "train_own.py"
    script.write_text(example_script())
    checkpoints = tmp_path / "ckpt"
    first = _torchrun(script, "--checkpoints", str(checkpoints), "--steps", "10")
    assert "step 10 loss" in first
    second = _torchrun(script, "--checkpoints", str(checkpoints), "--steps", "20")
    assert "step 10 loss" not in second and "step 20 loss" in second  # resumed at 10, not from 0


def test_the_documented_example_reads_a_manifest_through_the_cache(tmp_path, cached_manifest) -> None:
    script = tmp_path / "train_own.py"
    script.write_text(example_script())
    out = _torchrun(
        script,
        "--checkpoints", str(tmp_path / "ckpt"),
        "--steps", "10",
        "--manifest", str(cached_manifest.manifest),
        "--cache-config", str(cached_manifest.cache_config),
    )  # fmt: skip
    assert "step 10 loss" in out
    assert sum(cached_manifest.served.values()) > 0, "the example read around the cache"


@pytest.mark.parametrize("name", ["ManifestDataset", "ShardedMuon", "save_checkpoint", "load_checkpoint"])
def test_the_public_names_resolve(name: str) -> None:
    import megahour.train as api

    assert callable(getattr(api, name))
