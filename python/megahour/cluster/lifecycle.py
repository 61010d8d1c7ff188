"""Bring the local cluster up and down, build its images, and report its health."""

from __future__ import annotations

import glob
import shutil
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rich.console import Console

from megahour.atomicio import atomic_write_text
from megahour.cluster import podman
from megahour.cluster.images import DEFAULT_SUITE, BaseRecipe, NodeRecipe, debian_mirror_from_sources
from megahour.cluster.spec import (
    CACHE_MASTER_LABEL,
    CACHE_MOUNT,
    CLUSTER_LABEL,
    EXPECTED_SERVICES,
    ROLE_LABEL,
    SHARED_MOUNT,
    ClusterSpec,
    shared_volume_name,
)

HOST_CA_GLOB = "/usr/local/share/ca-certificates/**/*.crt"
APT_SOURCE_GLOBS = (
    "/etc/apt/sources.list",
    "/etc/apt/sources.list.d/*.list",
    "/etc/apt/sources.list.d/*.sources",
)
SYSTEMD_BOOT_TIMEOUT_S = 90


def host_ca_certificates() -> dict[str, bytes]:
    """The host's extra CA certificates (what `update-ca-certificates` adds to the trust store)."""
    certs = {}
    for path in sorted(glob.glob(HOST_CA_GLOB, recursive=True)):
        certs[Path(path).name] = Path(path).read_bytes()
    return certs


def host_recipes(suite: str = DEFAULT_SUITE) -> NodeRecipe:
    """The node recipe of Debian ``suite`` from this host's apt mirror and extra CA certificates."""
    texts = []
    for pattern in APT_SOURCE_GLOBS:
        for path in sorted(glob.glob(pattern)):
            try:
                texts.append(Path(path).read_text())
            except OSError:
                continue
    base = BaseRecipe(suite=suite, mirror=debian_mirror_from_sources(texts, suite))
    return NodeRecipe(base=base, ca_certificates=host_ca_certificates())


def ensure_images(console: Console, recipe: NodeRecipe | None = None, suite: str = DEFAULT_SUITE) -> str:
    """Build the base and node images unless their recipe tags exist; returns the node tag.

    The node image is tagged with its suite's alias too: bookworm's moves `:latest` (what `up` runs),
    trixie's moves `:trixie` and leaves `:latest` alone.
    """
    recipe = recipe or host_recipes(suite)
    if podman.image_exists(recipe.base.tag):
        console.print(f"[green]✓[/] base image {recipe.base.tag} (cached)")
    else:
        _build_base(console, recipe.base)
    if podman.image_exists(recipe.tag):
        console.print(f"[green]✓[/] node image {recipe.tag} (cached)")
    else:
        _build_node(console, recipe)
    podman.podman(["tag", recipe.tag, recipe.alias_tag])
    return recipe.tag


def _build_base(console: Console, base: BaseRecipe) -> None:
    if shutil.which("debootstrap") is None:
        raise podman.PodmanError("debootstrap is not installed; run `make prereqs`")
    with tempfile.TemporaryDirectory(prefix="megahour-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        started = time.monotonic()
        with console.status(f"debootstrap {base.suite} ({base.variant}) → {rootfs} (about 30 s)"):
            proc = subprocess.run(base.debootstrap_args(rootfs), capture_output=True, check=False)
        if proc.returncode != 0:
            tail = proc.stdout.decode(errors="replace")[-2000:] + proc.stderr.decode(errors="replace")[-2000:]
            raise podman.PodmanError(f"debootstrap failed (exit {proc.returncode}):\n{tail}")
        with console.status(f"podman import → {base.tag}"):
            tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
            imp = subprocess.run(
                ["podman", "import", "-", base.tag], stdin=tar.stdout, capture_output=True, check=False
            )
            tar.wait()
        if imp.returncode != 0 or tar.returncode != 0:
            raise podman.PodmanError(f"podman import failed: {imp.stderr.decode(errors='replace')}")
        console.print(f"[green]✓[/] built base image {base.tag} in {time.monotonic() - started:.0f} s")


def _build_node(console: Console, recipe: NodeRecipe) -> None:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="megahour-build-") as tmp:
        ctx = Path(tmp)
        (ctx / "ca").mkdir()
        for name, body in recipe.ca_certificates.items():
            (ctx / "ca" / name).write_bytes(body)
        (ctx / "Containerfile").write_text(recipe.containerfile())
        with console.status(f"podman build → {recipe.tag}"):
            proc = subprocess.run(
                ["podman", "build", "--tag", recipe.tag, "--file", str(ctx / "Containerfile"), str(ctx)],
                capture_output=True,
                check=False,
            )
        if proc.returncode != 0:
            out = (proc.stdout + proc.stderr).decode(errors="replace")[-4000:]
            raise podman.PodmanError(f"podman build of {recipe.tag} failed:\n{out}")
    console.print(f"[green]✓[/] built node image {recipe.tag} in {time.monotonic() - started:.0f} s")


def up(spec: ClusterSpec, inventory_path: Path, console: Console) -> None:
    ensure_images(console)
    if not podman.network_exists(spec.network):
        podman.podman(["network", "create", spec.network])
        console.print(f"[green]✓[/] network {spec.network}")
    if not podman.volume_exists(spec.shared_volume):
        podman.podman(["volume", "create", "--label", f"{CLUSTER_LABEL}={spec.name}", spec.shared_volume])
        console.print(f"[green]✓[/] volume {spec.shared_volume} (shared {SHARED_MOUNT} on every host)")
    for host in spec.hosts:
        volume = spec.cache_volume(host)
        if volume and not podman.volume_exists(volume):
            podman.podman(["volume", "create", "--label", f"{CLUSTER_LABEL}={spec.name}", volume])
            console.print(f"[green]✓[/] volume {volume} ({host.name}'s cache volume at {CACHE_MOUNT})")
    for host in spec.hosts:
        if podman.container_exists(host.name):
            info = podman.inspect_container(host.name)
            if info["Config"]["Labels"].get(CLUSTER_LABEL) != spec.name:
                raise podman.PodmanError(
                    f"a container named {host.name} exists but is not part of megahour cluster "
                    f"'{spec.name}'; remove it (`podman rm -f {host.name}`) or run `make down` first"
                )
            mounts = {m.get("Destination") for m in info.get("Mounts") or []}
            if spec.cache_volume(host) and CACHE_MOUNT not in mounts:
                # Made by a megahour before the cache volume: the storage role would refuse the node.
                raise podman.PodmanError(
                    f"{host.name} has no cache volume at {CACHE_MOUNT} (made by an older megahour); "
                    "recreate the cluster: `make down && make up`"
                )
            if not info["State"]["Running"]:
                podman.podman(["start", host.name])
                console.print(f"[green]✓[/] started {host.name}")
            else:
                console.print(f"[green]✓[/] {host.name} running")
            continue
        podman.podman(spec.run_args(host))
        console.print(f"[green]✓[/] created {host.name} ({host.role}, {host.gpus} fake GPUs)")
    _remove_extra_nodes(spec, console)
    for host in spec.hosts:
        _wait_for_systemd(host.name, console)
    if atomic_write_text(inventory_path, spec.inventory_yaml()):
        console.print(f"[green]✓[/] wrote inventory {inventory_path}")


def _remove_extra_nodes(spec: ClusterSpec, console: Console) -> None:
    wanted = {h.name for h in spec.hosts}
    for entry in podman.containers_with_label(f"{CLUSTER_LABEL}={spec.name}"):
        name = entry["Names"][0]
        if name not in wanted:
            podman.podman(["rm", "--force", name])
            console.print(f"[yellow]-[/] removed {name} (not in the requested shape)")


def _wait_for_systemd(name: str, console: Console) -> None:
    deadline = time.monotonic() + SYSTEMD_BOOT_TIMEOUT_S
    state = ""
    with console.status(f"waiting for systemd in {name}"):
        while time.monotonic() < deadline:
            proc = podman.exec_in(name, ["systemctl", "is-system-running"])
            state = proc.stdout.decode().strip()
            if state in ("running", "degraded"):
                return
            time.sleep(1)
    raise podman.PodmanError(
        f"systemd in {name} did not finish booting within {SYSTEMD_BOOT_TIMEOUT_S} s (state: {state!r}); "
        f"inspect it with `podman exec {name} systemctl --failed`"
    )


def down(spec_name: str, network: str, inventory_path: Path, console: Console) -> None:
    for entry in podman.containers_with_label(f"{CLUSTER_LABEL}={spec_name}"):
        name = entry["Names"][0]
        podman.podman(["rm", "--force", "--time", "5", name])
        console.print(f"[green]✓[/] removed {name}")
    if podman.network_exists(network):
        podman.podman(["network", "rm", network])
        console.print(f"[green]✓[/] removed network {network}")
    # The shared /srv/megahour (landing, storage, ingest runs) goes with the cluster.
    volume = shared_volume_name(spec_name)
    if podman.volume_exists(volume):
        podman.podman(["volume", "rm", "--force", volume])
        console.print(f"[green]✓[/] removed volume {volume} (the cluster's {SHARED_MOUNT})")
    # The compute nodes' cache volumes (their NVMe stand-ins) go too.
    for volume in podman.volumes_with_label(f"{CLUSTER_LABEL}={spec_name}"):
        podman.podman(["volume", "rm", "--force", volume])
        console.print(f"[green]✓[/] removed volume {volume}")
    if inventory_path.exists():
        inventory_path.unlink()
        console.print(f"[green]✓[/] removed {inventory_path}")


@dataclass
class HostStatus:
    name: str
    role: str
    state: str
    address: str | None
    systemd: str
    services: dict[str, str] = field(default_factory=dict)

    @property
    def healthy(self) -> bool:
        return (
            self.state == "running"
            and self.systemd == "running"
            and all(s == "active" for s in self.services.values())
        )

    def to_dict(self) -> dict:
        return {**asdict(self), "healthy": self.healthy}


def status(spec_name: str) -> list[HostStatus]:
    result = []
    for entry in sorted(
        podman.containers_with_label(f"{CLUSTER_LABEL}={spec_name}"), key=lambda e: e["Names"][0]
    ):
        name = entry["Names"][0]
        info = podman.inspect_container(name)
        role = info["Config"]["Labels"].get(ROLE_LABEL, "unknown")
        running = info["State"]["Running"]
        networks = info.get("NetworkSettings", {}).get("Networks", {}) or {}
        address = next((n.get("IPAddress") for n in networks.values() if n.get("IPAddress")), None)
        host = HostStatus(
            name, role, "running" if running else info["State"]["Status"], address, "unreachable"
        )
        if running:
            host.systemd = podman.exec_in(name, ["systemctl", "is-system-running"]).stdout.decode().strip()
            expected = EXPECTED_SERVICES.get(role, ())
            if info["Config"]["Labels"].get(CACHE_MASTER_LABEL):
                expected += ("alluxio-master",)
            for service in expected:
                proc = podman.exec_in(name, ["systemctl", "is-active", service])
                host.services[service] = proc.stdout.decode().strip() or "unknown"
        result.append(host)
    return result
