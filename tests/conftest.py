from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings

REPO = Path(__file__).resolve().parent.parent
# On a shared two-core machine (CPU steal, containers of the scenarios) one example's wall time says nothing
# about the code: no per-example deadline (speed is measured in benchmarks/, never here).
settings.register_profile("megahour", deadline=None)
settings.load_profile("megahour")
BIN = Path(sys.executable).parent
# Importing ansible's module_utils in this process (the filter plugin tests do) replaces sys.intern with
# a wrapper that accepts str subclasses; torch's dynamo, imported later by a Muon test, rejects any
# sys.intern that is not the builtin ("substitute_in_graph expects a function"). Conftest is imported
# before every test module, so this is the interpreter's own.
_BUILTIN_INTERN = sys.intern


@pytest.fixture(autouse=True)
def _builtin_sys_intern(monkeypatch):
    """Every test starts with the builtin sys.intern, whatever an earlier import patched."""
    monkeypatch.setattr(sys, "intern", _BUILTIN_INTERN)


def filter_plugins(path: Path) -> dict:
    """The filters of an Ansible filter plugin file (``roles/<role>/filter_plugins/<name>.py``), by name."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FilterModule().filters()


def tool(name: str) -> str:
    """A console script from this venv (ansible-playbook, molecule, megahour)."""
    path = BIN / name
    return str(path) if path.exists() else (shutil.which(name) or name)


@pytest.fixture
def run():
    def _run(args, *, cwd=REPO, env=None, timeout=300):
        full_env = dict(
            os.environ,
            ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
            ANSIBLE_NOCOLOR="1",
            PATH=f"{BIN}:{os.environ.get('PATH', '')}",
        )
        full_env.update(env or {})
        return subprocess.run(
            args, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout, check=False
        )

    return _run


@pytest.fixture
def run_playbook(run):
    """``ansible-playbook -i INVENTORY PLAYBOOK -e EXTRA``; the test fails, with the output's tail, unless
    it succeeds. The role render tests use it to render templates on this machine."""

    def _run_playbook(
        playbook: Path, inventory: Path, extra: dict, env: dict | None = None
    ) -> subprocess.CompletedProcess:
        args = [tool("ansible-playbook"), "-i", str(inventory), str(playbook), "-e", json.dumps(extra)]
        proc = run(args, env=env)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
        return proc

    return _run_playbook


@pytest.fixture(scope="session")
def warehouse(tmp_path_factory):
    """The embedded (chDB) warehouse. chDB serves one directory per process, so every test shares it."""
    from megahour.curation.warehouse import EmbeddedWarehouse

    return EmbeddedWarehouse(tmp_path_factory.mktemp("chdb") / "warehouse")


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """A real S3 server (s3proxy) that requires signed requests; see tests/s3server.py."""
    from tests import s3server

    root = tmp_path_factory.mktemp("s3-buckets")
    server, proc = s3server.start(root, tmp_path_factory.mktemp("s3proxy"))
    yield server
    proc.terminate()
    proc.wait(timeout=30)


@pytest.fixture
def s3(s3_server, monkeypatch):
    """The S3 server's credentials and endpoint in this test's environment, and nothing else of AWS's."""
    from tests import s3server

    for name in s3server.AWS_ENV:
        monkeypatch.delenv(name, raising=False)
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    return s3_server


@pytest.fixture(scope="session")
def promtool() -> str:
    """promtool, which `make prereqs` extracts from Debian's prometheus package: the tests fail (not skip)
    without it, since they are the only check of the alert rules and the collectors' text."""
    from megahour.cluster.prereqs import tool_path

    path = tool_path("promtool")
    if path is None:
        pytest.fail("promtool not found: run `make prereqs` (as root) or install Debian's prometheus package")
    return path


@pytest.fixture(scope="session")
def statsd_exporter() -> str:
    """Prometheus's statsd_exporter as the monitoring role deploys it: built from its pinned Go module
    into the same cache the role builds into on the control node (it needs `go`, as the role does)."""
    import yaml

    defaults = yaml.safe_load((REPO / "roles/monitoring/defaults/main.yml").read_text())
    module = defaults["monitoring_statsd_exporter_module"]
    version = defaults["monitoring_statsd_exporter_version"]
    cache = REPO / ".cache" / f"statsd_exporter-{version}"
    binary = cache / "statsd_exporter"
    if not binary.exists():
        go = shutil.which("go")
        if go is None:
            pytest.fail(f"no `go` to build statsd_exporter {version}: install Go 1.22+ (the role needs it)")
        env = dict(os.environ, GOBIN=str(cache), GOFLAGS="-buildvcs=false", CGO_ENABLED="0")
        proc = subprocess.run([go, "install", f"{module}@{version}"], env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    return str(binary)
