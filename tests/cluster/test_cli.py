"""`megahour cluster status` output and `cluster image --suite`, without podman."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def test_status_table_keeps_long_host_names_whole_through_a_pipe() -> None:
    name = "gpu-" + "rack17-row4-" * 8 + "node1"
    script = f"""
import sys
from megahour.cluster import lifecycle

class Host:
    name = {name!r}
    role = "compute"
    state = "running"
    address = "10.89.0.12"
    systemd = "running"
    services = {{"slurmd": "active", "munge": "failed"}}
    healthy = False

    def to_dict(self):
        return {{"name": self.name}}

lifecycle.status = lambda _name: [Host()]
from megahour.cli import main
sys.exit(main(["cluster", "status"]))
"""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, env=env
    )
    assert proc.returncode == 1, proc.stderr  # a host is not healthy
    assert name in proc.stdout and "munge✗(failed)" in proc.stdout and "…" not in proc.stdout


def test_image_help_lists_the_suite_choices_and_exit_codes(capsys) -> None:
    from megahour.cli import build_parser

    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["cluster", "image", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "--suite {bookworm,trixie}" in out and "(default: bookworm)" in out
    assert ":latest" in out and ":trixie" in out and "exit codes:" in out


def test_image_suite_defaults_to_bookworm_and_refuses_others(capsys) -> None:
    from megahour.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["cluster", "image"]).suite == "bookworm"
    assert parser.parse_args(["cluster", "image", "--suite", "trixie"]).suite == "trixie"
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["cluster", "image", "--suite", "sid"])
    assert exc.value.code == 2
    assert not hasattr(parser.parse_args(["cluster", "up"]), "suite")  # `up` stays on bookworm


def test_image_command_passes_the_suite(monkeypatch, capsys) -> None:
    from megahour.cli import main
    from megahour.cluster import lifecycle

    seen = []
    monkeypatch.setattr(
        lifecycle, "ensure_images", lambda console, suite: seen.append(suite) or "localhost/megahour-node:x"
    )
    assert main(["cluster", "image", "--suite", "trixie"]) == 0
    assert seen == ["trixie"] and "node image: localhost/megahour-node:x" in capsys.readouterr().out
