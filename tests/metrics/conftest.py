from __future__ import annotations

import subprocess

import pytest

from megahour.cluster.prereqs import tool_path


@pytest.fixture(scope="session")
def promtool() -> str:
    """promtool, which `make prereqs` extracts from Debian's prometheus package: the tests fail (not skip)
    without it, since they are the only check of the rules and the collectors' text."""
    path = tool_path("promtool")
    if path is None:
        pytest.fail("promtool not found: run `make prereqs` (as root) or install Debian's prometheus package")
    return path


@pytest.fixture
def check_metrics(promtool):
    """Lint exposition text with `promtool check metrics` (the format Prometheus parses)."""

    def check(text: str) -> None:
        proc = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr

    return check
