"""Thin adapter over the podman CLI. Decisions live in the callers."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence


class PodmanError(RuntimeError):
    """A podman command failed; the message carries the command and its stderr."""


def podman(
    args: Sequence[str], *, check: bool = True, input_bytes: bytes | None = None, capture: bool = True
) -> subprocess.CompletedProcess:
    cmd = ["podman", *args]
    try:
        proc = subprocess.run(cmd, input=input_bytes, capture_output=capture, check=False)
    except FileNotFoundError as exc:
        raise PodmanError(
            "podman is not installed; run `make prereqs` (or `megahour host prereqs --install`)"
        ) from exc
    if check and proc.returncode != 0:
        err = (proc.stderr or b"").decode(errors="replace").strip() if capture else ""
        raise PodmanError(f"`{' '.join(cmd)}` failed with exit code {proc.returncode}: {err}")
    return proc


def text(args: Sequence[str]) -> str:
    return podman(args).stdout.decode().strip()


def image_exists(tag: str) -> bool:
    return podman(["image", "exists", tag], check=False).returncode == 0


def network_exists(name: str) -> bool:
    return podman(["network", "exists", name], check=False).returncode == 0


def volume_exists(name: str) -> bool:
    return podman(["volume", "exists", name], check=False).returncode == 0


def container_exists(name: str) -> bool:
    return podman(["container", "exists", name], check=False).returncode == 0


def inspect_container(name: str) -> dict:
    return json.loads(text(["container", "inspect", name]))[0]


def volumes_with_label(label: str) -> list[str]:
    out = text(["volume", "ls", "--filter", f"label={label}", "--format", "{{.Name}}"])
    return out.split()


def containers_with_label(label: str) -> list[dict]:
    out = text(["ps", "--all", "--filter", f"label={label}", "--format", "json"])
    return json.loads(out) if out else []


def exec_in(name: str, args: Sequence[str], *, timeout: float = 30) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            ["podman", "exec", name, *args], capture_output=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(args, 124, b"", b"timed out")
