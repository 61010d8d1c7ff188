"""The molecule `cluster` scenario: site.yml on three systemd containers.

create -> converge -> idempotence (0 changed) -> verify, where verify asserts
sinfo, srun, sbatch + sacct, GRES and the live resilience settings. Output is
streamed so a long run shows progress; the log is kept under .cache/.
"""

import os
import re
import subprocess

import pytest

from tests.conftest import BIN, REPO, tool

pytestmark = pytest.mark.molecule
LOG = REPO / ".cache" / "molecule-cluster.log"
# Molecule's stage lines: "[cluster > converge] Executing" without a terminal,
# "cluster ➜ converge: Executing" with one.
STAGE = re.compile(r"(\[cluster > |cluster ➜ )\w+")


def test_cluster_scenario(capsys):
    env = dict(
        os.environ,
        PATH=f"{BIN}:{os.environ.get('PATH', '')}",
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        PY_COLORS="0",
        ANSIBLE_FORCE_COLOR="0",
    )
    image = subprocess.run(
        [tool("megahour"), "cluster", "image"], cwd=REPO, env=env, capture_output=True, text=True, check=False
    )
    assert image.returncode == 0, image.stdout + image.stderr
    LOG.parent.mkdir(exist_ok=True)
    lines = []
    with capsys.disabled(), LOG.open("w") as log:
        proc = subprocess.Popen(
            [tool("molecule"), "test", "-s", "cluster"],
            cwd=REPO,
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for line in proc.stdout:
            log.write(line)
            lines.append(line)
            if STAGE.search(line) or "fatal:" in line:
                print(f"  molecule | {line.rstrip()}", flush=True)
        rc = proc.wait()
    output = "".join(lines)
    assert rc == 0, f"molecule failed (full log: {LOG}):\n" + "".join(lines[-150:])
    for stage in ("converge", "idempotence", "check", "verify"):
        assert re.search(rf"{stage}\]?:? Executed: Successful", output), f"molecule did not pass {stage}"
