"""Host prerequisites for the local cluster: podman, runc, debootstrap, containers.conf.

On this project's machines podman needs three settings (see docs/local-cluster.md):
runc instead of crun (crun fails on hybrid cgroups), rlimits the host can grant
(podman's defaults fail with EPERM), and nothing else by hand. They live in a
drop-in file we own, so the host's own containers.conf is never edited.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from megahour.atomicio import atomic_write_text, atomic_writer

REQUIRED_COMMANDS: dict[str, str] = {  # command -> Debian package
    "podman": "podman",
    "runc": "runc",
    "debootstrap": "debootstrap",
    # Not for the containers: the storage role's loop-device test formats XFS on this host
    # (tests/roles/test_storage_loop_device.py), since the containers may not mount.
    "mkfs.xfs": "xfsprogs",
    # The alluxio role builds its distribution from Maven Central and compiles the S3 proxies'
    # authenticator on the control node (roles/alluxio); the tests' S3 server comes through Maven too.
    "mvn": "maven",
    "javac": "default-jdk-headless",
    # The dashboards' browser test (tests/hosts/test_consoles_browser.py) loads them in headless Chromium.
    "chromium-headless-shell": "chromium-headless-shell",
}
# Tools the tests run that Debian ships only inside a package that also installs and starts a daemon:
# the binary alone is taken out of the package (`apt-get download`, `dpkg-deb`) into TOOLS_DIR, so this
# host gets no Prometheus service. promtool tests the alert rules and lints the collectors' output; the
# prometheus binary renders the consoles in a test, run by the test itself on a loopback port.
EXTRACTED_TOOLS: dict[str, tuple[str, str]] = {
    "promtool": ("prometheus", "./usr/bin/promtool"),
    "prometheus": ("prometheus", "./usr/bin/prometheus"),
}
TOOLS_DIR = Path("/usr/local/libexec/megahour")
DROPIN_PATH = Path("/etc/containers/containers.conf.d/50-megahour.conf")
DROPIN_TEXT = """\
# Managed by megahour (`megahour host prereqs --install`); edits are overwritten.
# runc: crun fails here with "cgroups in hybrid mode not supported".
# default_ulimits: podman's defaults exceed what an unprivileged host grants
# (setrlimit EPERM); these values were measured to work.
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=4096:4096"]

[engine]
runtime = "runc"
"""


@dataclass
class PrereqReport:
    missing_commands: list[str] = field(default_factory=list)
    missing_tools: list[str] = field(default_factory=list)
    dropin_ok: bool = False
    dropin: Path = DROPIN_PATH

    @property
    def ok(self) -> bool:
        return not self.missing_commands and not self.missing_tools and self.dropin_ok

    def describe(self) -> list[str]:
        lines = []
        for cmd in self.missing_commands:
            lines.append(f"missing command `{cmd}` (Debian/Ubuntu package: {REQUIRED_COMMANDS[cmd]})")
        for tool in self.missing_tools:
            lines.append(
                f"missing `{tool}` (from the Debian package {EXTRACTED_TOOLS[tool][0]}, into {TOOLS_DIR})"
            )
        if not self.dropin_ok:
            lines.append(f"podman settings missing: {self.dropin} must contain the megahour drop-in")
        return lines


def check(dropin: Path = DROPIN_PATH) -> PrereqReport:
    report = PrereqReport(dropin=dropin)
    report.missing_commands = [c for c in REQUIRED_COMMANDS if shutil.which(c) is None]
    report.missing_tools = [t for t in EXTRACTED_TOOLS if tool_path(t) is None]
    try:
        report.dropin_ok = dropin.read_text() == DROPIN_TEXT
    except OSError:
        report.dropin_ok = False
    return report


def tool_path(name: str, tools_dir: Path = TOOLS_DIR) -> str | None:
    """Where ``name`` is: on PATH (the package installed), else as ``make prereqs`` extracted it."""
    extracted = tools_dir / name
    return shutil.which(name) or (str(extracted) if os.access(extracted, os.X_OK) else None)


def is_debian_like(os_release: str) -> bool:
    fields = dict(
        line.split("=", 1) for line in os_release.splitlines() if "=" in line and not line.startswith("#")
    )
    ids = {fields.get("ID", "").strip('"')} | set(fields.get("ID_LIKE", "").strip('"').split())
    return bool(ids & {"debian", "ubuntu"})


def manual_instructions(report: PrereqReport) -> str:
    pkgs = " ".join(REQUIRED_COMMANDS[c] for c in report.missing_commands) or "(none)"
    return (
        "The local cluster needs podman, runc, debootstrap and xfsprogs, plus podman settings.\n"
        f"  install the packages: {pkgs} (Debian/Ubuntu: apt-get install {pkgs})\n"
        + "".join(
            f"  extract {EXTRACTED_TOOLS[t][1]} from the package {EXTRACTED_TOOLS[t][0]} to {TOOLS_DIR}/{t} "
            f"(apt-get download {EXTRACTED_TOOLS[t][0]}; dpkg-deb -x), or install the package\n"
            for t in report.missing_tools
        )
        + f"  write {report.dropin} with:\n\n{DROPIN_TEXT}\n"
        "Or run `make prereqs` as root on a Debian/Ubuntu host, which does both."
    )


def install(report: PrereqReport, log=print, dropin: Path = DROPIN_PATH) -> None:
    """Install what ``report`` says is missing. Only for root on Debian-like hosts."""
    if report.missing_commands:
        pkgs = [REQUIRED_COMMANDS[c] for c in report.missing_commands]
        log(f"installing host packages: {' '.join(pkgs)}")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-q"], check=True, env=env)
        subprocess.run(["apt-get", "install", "-y", "-q", *pkgs], check=True, env=env)
    if report.missing_tools:
        log(f"extracting {', '.join(report.missing_tools)} from their Debian packages into {TOOLS_DIR}")
        extract_tools(report.missing_tools)
    if atomic_write_text(dropin, DROPIN_TEXT, 0o644):  # every user's podman reads it, whatever root's umask
        log(f"wrote podman settings to {dropin}")


def extract_tools(names: list[str], tools_dir: Path = TOOLS_DIR) -> list[Path]:
    """Download each package that holds one of ``names`` once and copy those files out of it (each
    atomically)."""
    written: list[Path] = []
    for package in sorted({EXTRACTED_TOOLS[name][0] for name in names}):
        wanted = [name for name in names if EXTRACTED_TOOLS[name][0] == package]
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            # as root, into a directory apt's own account cannot write: say so rather than print a warning
            subprocess.run(
                ["apt-get", "download", "-q", "-o", "APT::Sandbox::User=root", package], check=True, cwd=work
            )
            debs = sorted(work.glob(f"{package}_*.deb"))
            if not debs:
                raise RuntimeError(f"apt-get download {package} left no {package}_*.deb in {work}")
            tree = work / "tree"
            tree.mkdir()
            subprocess.run(["dpkg-deb", "-x", str(debs[-1]), str(tree)], check=True)
            tools_dir.mkdir(parents=True, exist_ok=True)
            for name in wanted:
                source = tree / EXTRACTED_TOOLS[name][1]
                if not source.is_file():
                    raise RuntimeError(f"{debs[-1].name} holds no {EXTRACTED_TOOLS[name][1]}")
                with source.open("rb") as binary, atomic_writer(tools_dir / name, 0o755) as out:
                    shutil.copyfileobj(binary, out)
                written.append(tools_dir / name)
    return written


def can_install() -> bool:
    try:
        release = Path("/etc/os-release").read_text()
    except OSError:
        return False
    return os.geteuid() == 0 and is_debian_like(release) and shutil.which("apt-get") is not None
