"""Helpers the benchmark scripts share (they are run as scripts, so they import this by path)."""

from __future__ import annotations

import json
import os
import shlex
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


# -- the local cluster ---------------------------------------------------------------------------------


def podman(
    *args: str, check: bool = True, timeout: float = 3600, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["podman", *args],
        capture_output=True,
        text=True,
        check=check,
        timeout=timeout,
        env=None if env is None else {**os.environ, **env},
    )


def in_container(
    name: str,
    command: str,
    *,
    user: str | None = None,
    check: bool = True,
    timeout: float = 3600,
    env: dict[str, str] | None = None,
):
    """``command`` in bash in the container; ``env`` is set there by name only (`podman exec --env NAME`
    takes the value from podman's own environment), so a secret never reaches a command line."""
    wrapped = f"runuser -u {user} -- bash -lc {shlex.quote(command)}" if user else command
    names = [f"--env={key}" for key in sorted(env or {})]
    return podman("exec", *names, name, "bash", "-lc", wrapped, check=check, timeout=timeout, env=env)


def running_containers() -> list[str] | str:
    """Names of the running containers, or why podman cannot tell."""
    try:
        return podman("ps", "--format", "{{.Names}}", check=False).stdout.split()
    except (OSError, subprocess.SubprocessError) as exc:
        return f"podman is not usable ({exc})"


def shared_mountpoint() -> Path:
    """Where the cluster's shared volume (mounted at /srv/megahour in every container) lives on this host."""
    from megahour.cluster.spec import shared_volume_name

    out = podman("volume", "inspect", "--format", "{{.Mountpoint}}", shared_volume_name("local"))
    return Path(out.stdout.strip())
