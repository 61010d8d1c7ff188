"""Helpers the benchmark scripts share (they are run as scripts, so they import this by path)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from rich.console import Console


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


def write_json(path: Path | None, results: dict, console: Console) -> None:
    """Write every figure to ``path`` (``--json``), with stable, sorted keys."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2, sort_keys=True))
    console.print(f"figures written to {path}")
