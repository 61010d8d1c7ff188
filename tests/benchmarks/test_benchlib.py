"""benchmarks/benchlib.py: how a command reaches a container of the local cluster."""

from __future__ import annotations

import subprocess

from tests.benchmarks import load_script


def test_in_container_passes_a_secret_by_name_only(monkeypatch):
    benchlib = load_script("benchlib")
    calls = []

    def run(argv, **kwargs):
        calls.append((argv, kwargs))
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(benchlib.subprocess, "run", run)
    monkeypatch.setenv("PATH", "/usr/bin")
    benchlib.in_container("gpu-1", "megahour cache warm --direct", env={"AWS_SECRET_ACCESS_KEY": "s3cr3t"})
    ((argv, kwargs),) = calls
    assert argv == [
        "podman",
        "exec",
        "--env=AWS_SECRET_ACCESS_KEY",
        "gpu-1",
        "bash",
        "-lc",
        "megahour cache warm --direct",
    ]
    assert "s3cr3t" not in " ".join(argv)
    assert kwargs["env"]["AWS_SECRET_ACCESS_KEY"] == "s3cr3t"
    assert kwargs["env"]["PATH"] == "/usr/bin"  # podman still finds its helpers


def test_in_container_without_env_inherits_the_environment(monkeypatch):
    benchlib = load_script("benchlib")
    calls = []
    monkeypatch.setattr(
        benchlib.subprocess,
        "run",
        lambda argv, **kw: calls.append(kw) or subprocess.CompletedProcess(argv, 0),
    )
    benchlib.in_container("ctl", "true", user="megahour")
    assert calls[0]["env"] is None
