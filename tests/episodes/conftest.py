"""Fixtures for the episode tests: a small synthetic episode written in the raw per-topic form."""

from __future__ import annotations

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
