"""The molecule scenarios, on systemd containers.

- cluster: the rolling upgrade on four containers; create -> prepare (the previous release's site.yml,
  jobs left running) -> converge (the checkout's upgrade.yml) -> verify,
  where verify asserts what the roll did (every host stamped, the jobs completed, each node drained
  only after its job ended), then sinfo, srun, sbatch + sacct, GRES, the live resilience settings, the
  cache tier and the loader, and an ingest run.
- faults: on Debian 13 (the trixie image; the others run bookworm): site.yml without the cache tier, the
  warehouse and Airflow on three containers; create ->
  converge -> idempotence (site.yml again, 0 changed) -> verify, where verify injects faults (the cases
  of docs/resilience.md) and asserts Slurm state, traces, the sweeper and Alertmanager.
- warehouse: common + warehouse on a server and a client container; create -> converge ->
  idempotence -> check -> verify, where verify queries ClickHouse 18.16 from the client with the
  rendered credentials (version, create/insert/count, the SQL curation relies on, a refused wrong
  password), checks the listen addresses, the data directory, and that no password is printed.
Output is streamed so a long run shows progress, each stage line with the seconds since molecule started
(a CI log shows where its time goes); logs are kept under .cache/. The scenario's named
volumes (its shared /srv/megahour) are removed before and after: molecule's podman driver destroys the
containers but not the volumes, and a volume left from an earlier run would carry its files into the next.
"""

import os
import re
import subprocess
import time

import pytest
import yaml

from megahour.cluster.images import NODE_REPO, SUITES
from tests.conftest import BIN, REPO, tool

pytestmark = pytest.mark.molecule
SCENARIOS = ("cluster", "faults", "warehouse")
# The stages of a scenario's test_sequence that must report "Executed: Successful".
CHECKED_STAGES = ("prepare", "converge", "idempotence", "check", "verify")


def stages(scenario: str) -> tuple[str, ...]:
    """The checked stages of the scenario's own test_sequence (molecule/<scenario>/molecule.yml)."""
    config = yaml.safe_load((REPO / "molecule" / scenario / "molecule.yml").read_text())
    return tuple(s for s in config["scenario"]["test_sequence"] if s in CHECKED_STAGES)


STAGES = {scenario: stages(scenario) for scenario in SCENARIOS}
# Molecule's stage lines: "[cluster > converge] Executing" without a terminal,
# "cluster ➜ converge: Executing" with one.
STAGE = re.compile(r"(\[\w+ > |\w+ ➜ )\w+")


def named_volumes(scenario: str) -> set[str]:
    """The named volumes the scenario's platforms mount ("name:/path"; a host path starts with /)."""
    config = yaml.safe_load((REPO / "molecule" / scenario / "molecule.yml").read_text())
    names = set()
    for platform in config.get("platforms", []):
        for volume in platform.get("volumes", []):
            source = str(volume).split(":", 1)[0]
            if source and not source.startswith(("/", ".")):
                names.add(source)
    return names


def image_suites(scenario: str) -> list[str]:
    """The Debian suites of the node images the scenario's platforms run (`:latest` is bookworm)."""
    config = yaml.safe_load((REPO / "molecule" / scenario / "molecule.yml").read_text())
    by_alias = {suite.alias: name for name, suite in SUITES.items()}
    suites = set()
    for platform in config.get("platforms", []):
        repo, _, alias = str(platform["image"]).rpartition(":")
        assert repo == NODE_REPO and alias in by_alias, f"{scenario}: {platform['image']} is no node image"
        suites.add(by_alias[alias])
    return sorted(suites)


def remove_volumes(names: set[str]) -> None:
    for name in sorted(names):
        subprocess.run(["podman", "volume", "rm", "--force", name], capture_output=True, check=False)


@pytest.mark.parametrize("scenario", sorted(STAGES))
def test_scenario(scenario, capsys):
    volumes = named_volumes(scenario)
    # --force also removes a container a crashed earlier run left on the volume; molecule test begins
    # by destroying the scenario's containers anyway.
    remove_volumes(volumes)
    try:
        run_scenario(scenario, capsys)
    finally:
        remove_volumes(volumes)


def run_scenario(scenario, capsys):
    log_path = REPO / ".cache" / f"molecule-{scenario}.log"
    env = dict(
        os.environ,
        PATH=f"{BIN}:{os.environ.get('PATH', '')}",
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        PY_COLORS="0",
        ANSIBLE_FORCE_COLOR="0",
    )
    for suite in image_suites(scenario):
        image = subprocess.run(
            [tool("megahour"), "cluster", "image", "--suite", suite],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert image.returncode == 0, image.stdout + image.stderr
    log_path.parent.mkdir(exist_ok=True)
    lines = []
    with capsys.disabled(), log_path.open("w") as log:
        proc = subprocess.Popen(
            [tool("molecule"), "test", "-s", scenario],
            cwd=REPO,
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        started = time.monotonic()
        for line in proc.stdout:
            log.write(line)
            lines.append(line)
            if STAGE.search(line) or "fatal:" in line:
                elapsed = time.monotonic() - started
                print(f"  molecule {scenario} | {elapsed:5.0f} s | {line.rstrip()}", flush=True)
        rc = proc.wait()
    output = "".join(lines)
    assert rc == 0, f"molecule {scenario} failed (full log: {log_path}):\n" + "".join(lines[-150:])
    for stage in STAGES[scenario]:
        assert re.search(rf"{stage}\]?:? Executed: Successful", output), f"molecule did not pass {stage}"
