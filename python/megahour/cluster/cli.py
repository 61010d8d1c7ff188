"""`megahour host prereqs` and `megahour cluster image|up|down|status`: the local podman cluster."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from megahour import cliutil

if TYPE_CHECKING:
    from rich.console import Console

DEFAULT_LOCAL_INVENTORY = Path("inventories/local/hosts.yml")


def errors() -> tuple[type[BaseException], ...]:
    from megahour.cluster.podman import PodmanError
    from megahour.cluster.spec import SpecError

    return (PodmanError, SpecError)


def register(subparsers: cliutil.Subparsers) -> None:
    from megahour.cluster.images import DEFAULT_SUITE, SUITES  # standard library only

    host = cliutil.add_group(subparsers, "host", help="this machine (the control node)", errors=errors)
    p = cliutil.add_command(
        host,
        "prereqs",
        _cmd_host_prereqs,
        help="check (and with --install, install) podman, runc, debootstrap",
        exits={0: "every prerequisite is present (or was installed)", 1: "something is missing"},
    )
    p.add_argument("--install", action="store_true", help="install what is missing (root on Debian/Ubuntu)")

    cluster = cliutil.add_group(subparsers, "cluster", help="the local podman cluster", errors=errors)
    failed = "podman or the cluster's spec failed (the message says which)"
    p = cliutil.add_command(
        cluster,
        "image",
        _cmd_cluster_image,
        help="build the node image (cached by recipe)",
        exits={0: "the image is built (or was cached)", 1: failed},
    )
    p.add_argument(
        "--suite",
        choices=list(SUITES),
        default=DEFAULT_SUITE,
        help="Debian release of the image: bookworm is also tagged :latest (what `cluster up` runs), "
        "trixie is tagged :trixie and leaves :latest alone",
    )
    p = cliutil.add_command(
        cluster,
        "up",
        _cmd_cluster_up,
        help="create the containers and write the local inventory",
        exits={0: "the cluster is up and the inventory written", 1: failed},
    )
    p.add_argument("--nodes", type=int, default=2, help="compute nodes")
    p.add_argument("--gpus-per-node", type=int, default=2, help="fake GPUs per compute node")
    p.add_argument(
        "--gpu-model",
        default="h100",
        help="GPU model profile of the fake GPUs (`megahour inventory validate` checks it when deploying)",
    )
    p.add_argument(
        "--remote-store",
        action="store_true",
        help="add the `store` container: the cache's under-store as a remote S3 server (tc and delays)",
    )
    p.add_argument(
        "--backup-controller",
        action="store_true",
        help="add `ctl2`, a backup slurmctld that takes over when ctl's stops answering (docs/resilience.md)",
    )
    p.add_argument(
        "--cache-masters",
        type=int,
        default=1,
        help="Alluxio masters: 1 (on ctl), or 3 or more: ctl and the first compute nodes (docs/delivery.md)",
    )
    p.add_argument("--inventory", default=str(DEFAULT_LOCAL_INVENTORY), help="generated inventory file")
    p = cliutil.add_command(
        cluster,
        "down",
        _cmd_cluster_down,
        help="remove the containers, network and local inventory",
        exits={0: "nothing of the cluster is left", 1: failed},
    )
    p.add_argument("--inventory", default=str(DEFAULT_LOCAL_INVENTORY), help="generated inventory file")
    p = cliutil.add_command(
        cluster,
        "status",
        _cmd_cluster_status,
        help="hosts, addresses and service health",
        exits={
            0: "every host and service is healthy",
            1: "no local cluster, or a host or service is not healthy",
        },
    )
    cliutil.add_json_flag(p)


def _cmd_host_prereqs(args: argparse.Namespace, console: Console) -> int:
    from megahour.cluster import prereqs

    report = prereqs.check()
    if report.ok:
        console.print("[green]✓[/] host prerequisites present (podman, runc, debootstrap, podman settings)")
        return 0
    if args.install and prereqs.can_install():
        prereqs.install(report, log=lambda text: console.print(text, markup=False, highlight=False))
        report = prereqs.check()
        if report.ok:
            console.print("[green]✓[/] host prerequisites installed")
            return 0
    for text in report.describe():
        console.print(cliutil.line(("✗", "red"), " ", text))
    console.print(prereqs.manual_instructions(report), markup=False, highlight=False)
    return 1


def _spec(args: argparse.Namespace):
    from megahour.cluster.spec import ClusterSpec

    return ClusterSpec(
        compute_nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        gpu_model=args.gpu_model,
        remote_store=args.remote_store,
        backup_controller=args.backup_controller,
        cache_masters=args.cache_masters,
    )


def _cmd_cluster_image(args: argparse.Namespace, console: Console) -> int:
    from megahour.cluster import lifecycle

    tag = lifecycle.ensure_images(console, suite=args.suite)
    console.print(f"node image: {tag}", markup=False)
    return 0


def _cmd_cluster_up(args: argparse.Namespace, console: Console) -> int:
    from megahour.cluster import lifecycle

    lifecycle.up(_spec(args), Path(args.inventory), console)
    console.print("cluster is up; deploy with `ansible-playbook playbooks/site.yml` (or `make up`)")
    return 0


def _cmd_cluster_down(args: argparse.Namespace, console: Console) -> int:
    from megahour.cluster import lifecycle
    from megahour.cluster.spec import ClusterSpec

    spec = ClusterSpec()
    lifecycle.down(spec.name, spec.network, Path(args.inventory), console)
    return 0


def _cmd_cluster_status(args: argparse.Namespace, console: Console) -> int:
    from megahour.cluster import lifecycle
    from megahour.cluster.spec import ClusterSpec

    hosts = lifecycle.status(ClusterSpec().name)
    healthy = bool(hosts) and all(h.healthy for h in hosts)
    if args.json:
        cliutil.print_json({"healthy": healthy, "hosts": [h.to_dict() for h in hosts]})
        return 0 if healthy else 1
    if not hosts:
        console.print("no local cluster; start one with `make up`")
        return 1
    rows = []
    for h in hosts:
        services = " ".join(f"{k}{'✓' if v == 'active' else '✗(' + v + ')'}" for k, v in h.services.items())
        mark = cliutil.styled("yes", "green") if h.healthy else cliutil.styled("no", "red")
        rows.append((h.name, h.role, h.state, h.address or "-", h.systemd, services, mark))
    columns = ("host", "role", "container", "address", "systemd", "services", "healthy")
    console.print(cliutil.table(columns, rows, title="megahour local cluster"))
    return 0 if healthy else 1
