"""A rank that loses its peer exits for a restart: checked on the error torch's gloo really raises."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

from megahour.train.failures import is_peer_lost  # noqa: E402
from megahour.train.spawn import free_port  # noqa: E402

PAIR = textwrap.dedent(
    """
    import os, sys
    import torch, torch.distributed as dist
    from megahour.train.failures import is_peer_lost
    rank = int(sys.argv[1])
    dist.init_process_group("gloo", rank=rank, world_size=2, init_method="tcp://127.0.0.1:" + sys.argv[2])
    t = torch.ones(64)
    for step in range(100000):
        if rank == 1 and step == 20:
            os.kill(os.getpid(), 9)  # the peer dies mid-run, as under the OOM killer
        try:
            dist.all_reduce(t)
        except Exception as exc:
            print("peer_lost" if is_peer_lost(exc) else "other", type(exc).__name__, flush=True)
            sys.exit(0)
    """
)


def test_the_survivor_of_a_killed_peer_sees_a_peer_loss() -> None:
    port = str(free_port())
    ranks = [
        subprocess.Popen([sys.executable, "-c", PAIR, str(r), port], stdout=subprocess.PIPE, text=True)
        for r in (0, 1)
    ]
    out0, _ = ranks[0].communicate(timeout=120)
    ranks[1].wait(timeout=120)
    assert ranks[1].returncode == -9
    assert out0.split()[0] == "peer_lost", out0


def test_a_bug_is_not_a_peer_loss() -> None:
    assert not is_peer_lost(ValueError("shape mismatch"))
    assert not is_peer_lost(RuntimeError("CUDA out of memory"))


def test_the_cause_chain_is_followed() -> None:
    try:
        try:
            raise torch.distributed.DistNetworkError("Connection reset by peer")
        except Exception as inner:
            raise RuntimeError("checkpoint save failed") from inner
    except RuntimeError as outer:
        assert is_peer_lost(outer)
