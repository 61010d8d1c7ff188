"""`megahour cluster status` output, without podman."""

from __future__ import annotations

import os
import subprocess
import sys


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
