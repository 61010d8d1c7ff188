"""The doctor's one adapter to Ansible: run ``probe.sh`` on the hosts with ``ansible -m script``.

``ansible.builtin.script`` copies the probe and runs it with the host's shell, so it needs no Python on
the host. Results come back through Ansible's JSON callback (``ansible.posix.json``), one per host:
the probe's stdout, or why the host could not be reached.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from megahour.inventory.source import STRICT_ENV, find_tool

PROBE = "probe.sh"
# The JSON report alone on stdout: callbacks the user enabled (profile_tasks, timer: molecule's scenarios
# enable profile_tasks) print there too, and the report would not parse.
JSON_CALLBACK = {
    "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
    "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
    # Enabled, an empty list is refused ("A non-empty plugin name is required"): name the stdout callback.
    "ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.json",
}


class TransportError(RuntimeError):
    """Ansible itself could not run (not: a host could not be reached, which is a result)."""


@dataclass
class ProbeRun:
    outputs: dict[str, str] = field(default_factory=dict)  # host -> the probe's stdout
    unreachable: dict[str, str] = field(default_factory=dict)  # host -> Ansible's message
    window: tuple[float, float] = (0.0, 0.0)  # the control node's clock before and after the run


def probe_path() -> Path:
    return Path(str(resources.files("megahour.doctor").joinpath(PROBE)))


def command(inventory: Path, pattern: str, paths: list[str]) -> list[str]:
    free_form = " ".join(shlex.quote(p) for p in [str(probe_path()), *paths])
    return [
        find_tool("ansible"),
        "-i",
        str(inventory),
        pattern,
        "-m",
        "ansible.builtin.script",
        "-a",
        free_form,
    ]


def parse_results(text: str) -> tuple[dict[str, str], dict[str, str]]:
    """(outputs, unreachable) from the JSON callback's report of one ad-hoc task."""
    report = json.loads(text)
    outputs: dict[str, str] = {}
    unreachable: dict[str, str] = {}
    for play in report.get("plays", []):
        for task in play.get("tasks", []):
            for host, result in task.get("hosts", {}).items():
                if result.get("unreachable") or result.get("failed"):
                    message = result.get("msg") or result.get("stderr") or result.get("module_stderr") or ""
                    unreachable[host] = str(message)
                else:
                    outputs[host] = str(result.get("stdout", ""))
    return outputs, unreachable


def run_probe(inventory: Path, pattern: str, paths: list[str], timeout_s: float = 300.0) -> ProbeRun:
    args = command(inventory, pattern, paths)
    start = time.time()
    try:
        proc = subprocess.run(
            args,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            env={**os.environ, **STRICT_ENV, **JSON_CALLBACK},
        )
    except subprocess.TimeoutExpired:
        raise TransportError(
            f"ansible did not finish the probe within {timeout_s:.0f} s; "
            "pass a longer --timeout, or --limit to fewer hosts"
        ) from None
    end = time.time()
    try:
        outputs, unreachable = parse_results(proc.stdout)
    except (json.JSONDecodeError, AttributeError):
        tail = " ".join((proc.stderr or proc.stdout).split())[-300:]
        raise TransportError(
            f"ansible printed no report (exit {proc.returncode}): {tail or 'no output'}"
        ) from None
    return ProbeRun(outputs, unreachable, (start, end))
