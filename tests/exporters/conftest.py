from __future__ import annotations

import subprocess

import pytest


@pytest.fixture
def check_metrics(promtool):
    """Lint exposition text with `promtool check metrics` (the format Prometheus parses)."""

    def check(text: str) -> None:
        proc = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr

    return check
