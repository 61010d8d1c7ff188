"""Helpers the benchmark scripts share (they are run as scripts, so they import this by path)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def git_commit() -> str:
    """The short commit the figures are measured at, or "unknown" outside a checkout."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parent,
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
