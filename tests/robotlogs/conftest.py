"""Fixtures for the robot-log tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from megahour.episodes import mcapio
from megahour.episodes.synthetic import synthetic_recording


@pytest.fixture(scope="session")
def raw_episode_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    recording, _ = synthetic_recording(1.0)
    path = tmp_path_factory.mktemp("robotlogs") / "raw.mcap"
    mcapio.write_raw(recording, path)
    return path
