"""Run a playbook through ansible-runner (the adapter: the one module that imports it).

ansible-runner starts ``ansible-playbook`` with the checkout as its project directory (so ansible.cfg,
roles and plugins are the checkout's), keeps the run's artifacts (stdout, every event as JSON, the
command line, rc and status) under ``<artifacts root>/<UTC timestamp>/``, and hands each event to
``megahour.deploy.events`` for the progress lines and the recap.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from megahour.deploy.events import DeployTally

ARTIFACTS_ENV = "MEGAHOUR_DEPLOY_ARTIFACTS"
DEFAULT_ARTIFACTS = Path(".cache") / "deploy-runs"
CANCEL_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class DeployError(Exception):
    """A deploy that cannot start (a missing playbook or inventory, no ansible-runner)."""


@dataclass(frozen=True)
class DeployRequest:
    playbook: Path
    project_dir: Path
    artifacts_root: Path
    # A path (inventories/<vendor>, a hosts file), or an inline host list as ansible takes it ("a,b,").
    inventory: str | None = None
    limit: str | None = None
    tags: str | None = None
    skip_tags: str | None = None
    extra_vars: tuple[str, ...] = ()
    check: bool = False
    diff: bool = False
    vault_password_file: Path | None = None

    @property
    def inline_inventory(self) -> bool:
        return self.inventory is not None and "," in self.inventory and not Path(self.inventory).exists()

    def cmdline(self) -> str:
        """The ansible-playbook options ansible-runner has no parameter for (an inline host list too:
        ansible-runner would take the text for an inventory file's content)."""
        args: list[str] = ["-i", self.inventory] if self.inline_inventory and self.inventory else []
        for value in self.extra_vars:
            args += ["-e", value]
        if self.check:
            args.append("--check")
        if self.diff:
            args.append("--diff")
        if self.vault_password_file is not None:
            args += ["--vault-password-file", str(self.vault_password_file)]
        return shlex.join(args)


@dataclass
class DeployResult:
    status: str  # ansible-runner's: successful, failed, timeout, canceled
    rc: int
    artifacts: Path
    seconds: float
    tally: DeployTally = field(default_factory=DeployTally)

    @property
    def ok(self) -> bool:
        return self.status == "successful" and self.rc == 0

    def summary(self) -> dict:
        return {
            "status": self.status,
            "rc": self.rc,
            "ok": self.ok,
            "seconds": round(self.seconds, 1),
            "artifacts": str(self.artifacts),
            **self.tally.summary(),
        }


def check_request(request: DeployRequest) -> None:
    if not request.playbook.is_file():
        raise DeployError(
            f"no playbook at {request.playbook}: run from the megahour checkout or pass --playbook"
        )
    if request.vault_password_file is not None and not request.vault_password_file.is_file():
        raise DeployError(
            f"no vault password file at {request.vault_password_file}: pass the file (or a script) that "
            "prints the Ansible Vault password"
        )
    if (
        request.inventory is not None
        and not request.inline_inventory
        and not Path(request.inventory).exists()
    ):
        raise DeployError(
            f"no inventory at {request.inventory}: pass -i inventories/<vendor> (`make up` writes "
            "inventories/local's hosts for the local cluster)"
        )


def search_path(current: str) -> str:
    """PATH with megahour's own environment first, so ansible-playbook is the pinned Ansible of `make
    venv` even when the venv is not activated (``.venv/bin/megahour deploy``)."""
    own = str(Path(sys.executable).parent)
    parts = [p for p in current.split(os.pathsep) if p and p != own]
    path = os.pathsep.join([own, *parts])
    if shutil.which("ansible-playbook", path=path) is None:
        raise DeployError(
            "ansible-playbook is not installed: `make venv` (or pip install 'megahour[deploy]')"
        )
    return path


def new_ident(root: Path, now: datetime | None = None) -> str:
    """A UTC timestamp not yet used under ``root`` (a suffix when two deploys start in one second)."""
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    ident, n = stamp, 1
    while (root / ident).exists():
        n += 1
        ident = f"{stamp}-{n}"
    return ident


def run(
    request: DeployRequest,
    on_line: Callable[[str], None],
    *,
    tally: DeployTally | None = None,
    env: dict[str, str] | None = None,
) -> DeployResult:
    """Run the playbook; ``on_line`` gets each progress line as it happens. Ctrl-C cancels the run
    (ansible-runner stops ansible-playbook) and returns status ``canceled``."""
    check_request(request)
    try:
        import ansible_runner
    except ImportError:
        raise DeployError(
            "ansible-runner is not installed: `make venv` (or pip install 'megahour[deploy]')"
        ) from None
    tally = tally or DeployTally()
    root = request.artifacts_root.resolve()
    root.mkdir(parents=True, exist_ok=True)
    ident = new_ident(root)
    envvars = dict(env or {})
    envvars["PATH"] = search_path(envvars.get("PATH", os.environ.get("PATH", "")))
    config = request.project_dir / "ansible.cfg"
    if "ANSIBLE_CONFIG" not in os.environ and "ANSIBLE_CONFIG" not in envvars and config.is_file():
        envvars["ANSIBLE_CONFIG"] = str(config.resolve())

    cancelled = threading.Event()

    def handler(event: dict) -> bool:
        for line in tally.feed(event):
            on_line(line)
        return True  # keep the event in the artifacts' job_events/

    # With a cancel_callback ansible-runner installs no handler of its own: Ctrl-C, a kill (a CI
    # timeout, `timeout`) and a closed terminal all stop ansible-playbook through it, never orphan it.
    previous: dict[int, object] = {}
    if threading.current_thread() is threading.main_thread():
        for number in CANCEL_SIGNALS:
            previous[number] = signal.signal(number, lambda *_: cancelled.set())
    began = time.monotonic()
    try:
        # private_data_dir holds only what ansible-runner writes for itself (env/, a copy of the
        # inventory when given as text): a scratch directory. The artifacts go to their own root.
        with tempfile.TemporaryDirectory(prefix="megahour-deploy-") as private:
            runner = ansible_runner.run(
                private_data_dir=private,
                project_dir=str(request.project_dir.resolve()),
                playbook=str(request.playbook.resolve()),
                inventory=(
                    str(Path(request.inventory).resolve())
                    if request.inventory and not request.inline_inventory
                    else None
                ),
                limit=request.limit,
                tags=request.tags,
                skip_tags=request.skip_tags,
                cmdline=request.cmdline() or None,
                envvars=envvars or None,
                artifact_dir=str(root),
                ident=ident,
                event_handler=handler,
                cancel_callback=cancelled.is_set,
                quiet=True,
                rotate_artifacts=0,
            )
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    status = "canceled" if cancelled.is_set() else str(runner.status)
    rc = runner.rc if isinstance(runner.rc, int) else 1
    return DeployResult(status, rc, root / ident, time.monotonic() - began, tally)


def stdout_tail(artifacts: Path, lines: int = 15) -> list[str]:
    """The last lines ansible-playbook printed (its artifacts' stdout), for a run that failed before any
    task did (a syntax error, a missing role)."""
    try:
        text = (artifacts / "stdout").read_text(errors="replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()][-lines:]
