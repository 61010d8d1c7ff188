"""`megahour inventory validate`: the inventory contract, checked before any host is touched.
`megahour inventory new`: a vendor inventory scaffolded from a few answers, written, then validated."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from megahour import cliutil

if TYPE_CHECKING:
    from rich.console import Console

    from megahour.inventory.scaffold import ScaffoldAnswers

# Not a usage error, but the same code as before: the inventory could not be read at all.
UNREADABLE_EXIT = 2
# `inventory new`: an answer that is missing (and cannot be asked), bad, or an existing inventory.
REFUSED_EXIT = 2


def register(subparsers: cliutil.Subparsers) -> None:
    inventory = cliutil.add_group(subparsers, "inventory", help="inventory contract")
    p = cliutil.add_command(
        inventory,
        "validate",
        _cmd_validate,
        help="check an inventory before deploying",
        exits={
            0: "the inventory is valid",
            1: "findings: each names the variable, the hosts and the fix",
            UNREADABLE_EXIT: "usage error, or the inventory cannot be read (missing, not parsable, no hosts, "
            "ansible-inventory not installed)",
        },
    )
    p.add_argument("-i", "--inventory", required=True, help="inventory directory or file")
    cliutil.add_json_flag(p)
    _register_new(inventory)


def _cmd_validate(args: argparse.Namespace, console: Console) -> int:
    from megahour.inventory.source import InventoryError, load_snapshot
    from megahour.inventory.validate import render_grouped, validate

    try:
        findings = validate(load_snapshot(Path(args.inventory)))
    except InventoryError as exc:
        raise cliutil.CommandError(str(exc), UNREADABLE_EXIT) from None
    if args.json:
        cliutil.print_json({"ok": not findings, "findings": [f.to_dict() for f in findings]})
    elif findings:
        # Finding text quotes values and fixes such as [/dev/nvme0n1, ...]: never rich markup.
        for text in render_grouped(findings):
            console.print(cliutil.line(("✗", "red"), " ", text), highlight=False)
    else:
        console.print(cliutil.line(("✓", "green"), f" {args.inventory}: valid"), highlight=False)
    return 1 if findings else 0


# --- inventory new ----------------------------------------------------------------------------------------


def _register_new(inventory: cliutil.Subparsers) -> None:
    # Small, dependency-free modules: their closed sets become the flags' choices.
    from megahour.inventory.fabric import FABRIC_TYPES
    from megahour.inventory.platforms import supported
    from megahour.inventory.scaffold import (
        DEFAULT_CACHE_SIZE,
        DEFAULT_CONTROLLER,
        DEFAULT_NODE_PREFIX,
        DEFAULT_USER,
        DOCS,
    )
    from megahour.inventory.validate import DEFAULT_SHARED_ROOT

    p = cliutil.add_command(
        inventory,
        "new",
        _cmd_new,
        help="scaffold a vendor inventory (hosts.yml, group_vars) and validate it",
        description=(
            "Writes DIR/NAME/hosts.yml, group_vars/all.yml and group_vars/compute.yml, commented, in the "
            "layout of inventories/example-baremetal-h100, then validates them as `megahour inventory "
            "validate` does. A required answer that is not given is asked for when stdin is a terminal; "
            f"otherwise it is a usage error naming the flag. {DOCS} explains each setting."
        ),
        exits={
            0: "written and valid",
            1: "written, but validation has findings (each names the variable, the hosts and the fix)",
            REFUSED_EXIT: "usage error: a missing or bad answer (each named by its flag, with the fix), "
            "an existing inventory without --force, or the written inventory cannot be read",
        },
    )
    p.add_argument("name", metavar="NAME", help="the inventory's directory name (and megahour_vendor)")
    p.add_argument(
        "--gpu", metavar="MODEL", help="GPU model: a built-in GPU profile (megahour_gpu.model), e.g. b200"
    )
    p.add_argument(
        "--gpus-per-node", type=int, metavar="N", help="GPUs in each compute node (megahour_gpu.count)"
    )
    p.add_argument("--nodes", type=int, metavar="N", help="how many compute nodes")
    p.add_argument(
        "--node-prefix",
        default=DEFAULT_NODE_PREFIX,
        help="compute nodes are named PREFIX001, PREFIX002, ... (also their Slurm names)",
    )
    p.add_argument("--controller", default=DEFAULT_CONTROLLER, help="the Slurm controller's host name")
    p.add_argument(
        "--controller-address",
        metavar="ADDRESS",
        help="the controller's ansible_host (IP address or DNS name); without it, hosts.yml says where to "
        "add one",
    )
    p.add_argument(
        "--first-address",
        metavar="IPV4",
        help="the first compute node's ansible_host; each next node gets the next last octet",
    )
    p.add_argument(
        "--os", choices=supported(), help="the image the vendor installs on every node (megahour_os)"
    )
    p.add_argument("--fabric", choices=FABRIC_TYPES, help="the network NCCL uses between nodes")
    p.add_argument(
        "--fabric-interface",
        metavar="IFACE",
        help="the NIC NCCL uses (for example ib0, ens8f0); required unless --fabric none",
    )
    p.add_argument(
        "--nvme",
        action="append",
        metavar="DEV",
        help="an NVMe block device of each node (repeat per device); device K caches in /mnt/nvmeK/alluxio",
    )
    p.add_argument(
        "--cache-size",
        default=DEFAULT_CACHE_SIZE,
        help="how much of each NVMe device the cache may fill (KB, MB, GB or TB)",
    )
    p.add_argument(
        "--shared-root",
        default=DEFAULT_SHARED_ROOT,
        help="where every host mounts the shared filesystem (megahour_shared_root)",
    )
    p.add_argument(
        "--under-store",
        metavar="URL",
        help="the cache tier's under-store: s3://BUCKET/PREFIX, or an absolute directory every node mounts",
    )
    p.add_argument(
        "--ansible-user",
        default=DEFAULT_USER,
        help="the user Ansible logs in as; a user other than root gets ansible_become: true (it needs sudo)",
    )
    p.add_argument("--dir", default="inventories", help="the directory the inventory directory goes in")
    p.add_argument(
        "--force",
        action="store_true",
        help="overwrite the three files of an existing inventory directory (other files are kept)",
    )
    cliutil.add_json_flag(
        p, help="print {path, files, valid, findings} as JSON on stdout (questions and messages go to stderr)"
    )


def _stdin_is_terminal() -> bool:
    try:
        return bool(sys.stdin.isatty())
    except (AttributeError, ValueError):
        return False


def _ask(
    question: str,
    flag: str,
    *,
    choices: Sequence[str] | None = None,
    default: str | None = None,
    parse: Callable[[str], Any] = str,
) -> Any:
    """Ask on stderr (stdout may be --json) until the answer is usable; EOF or Ctrl-C refuses."""
    shown = f" [{', '.join(choices)}]" if choices else ""
    shown += f" ({default})" if default is not None else ""
    while True:
        sys.stderr.write(f"{question}{shown}: ")
        sys.stderr.flush()
        try:
            raw = input().strip()
        except (EOFError, KeyboardInterrupt):
            sys.stderr.write("\n")
            raise cliutil.CommandError(
                f"no answer for {flag}: nothing was written; pass {flag} to answer it", REFUSED_EXIT
            ) from None
        if not raw and default is not None:
            raw = default
        if not raw:
            continue
        if choices and raw not in choices:
            sys.stderr.write(f"  {raw!r} is not one of {', '.join(choices)}\n")
            continue
        try:
            return parse(raw)
        except ValueError:
            sys.stderr.write(f"  {raw!r} is not a whole number\n")


def _answers(args: argparse.Namespace) -> ScaffoldAnswers:
    """The answers from the flags, the missing required ones asked for (a terminal) or refused."""
    from megahour.inventory.fabric import FABRIC_TYPES
    from megahour.inventory.platforms import supported
    from megahour.inventory.profiles import known_models, profile_for
    from megahour.inventory.scaffold import ScaffoldAnswers

    gpu = args.gpu.strip().lower() if args.gpu is not None else None
    values: dict[str, Any] = {
        "gpu": gpu,
        "gpus_per_node": args.gpus_per_node,
        "nodes": args.nodes,
        "os": args.os,
        "fabric": args.fabric,
        "fabric_interface": args.fabric_interface,
        "nvme": args.nvme,
        "under_store": args.under_store,
    }
    needs_interface = args.fabric not in (None, "none")
    required = [
        dest for dest in values if values[dest] is None and (dest != "fabric_interface" or needs_interface)
    ]
    if required and not _stdin_is_terminal():
        flags = ", ".join("--" + dest.replace("_", "-") for dest in required)
        raise cliutil.CommandError(
            f"missing {flags}: pass {'it' if len(required) == 1 else 'them'} (stdin is not a terminal, so "
            "nothing can be asked); `megahour inventory new --help` lists every flag",
            REFUSED_EXIT,
        )
    if values["gpu"] is None:
        values["gpu"] = _ask("GPU model (megahour_gpu.model)", "--gpu", choices=known_models())
    if values["gpus_per_node"] is None:
        profile = profile_for(values["gpu"])
        counts = [str(c) for c in profile.counts_per_node] if profile is not None else None
        values["gpus_per_node"] = _ask(
            "GPUs per node",
            "--gpus-per-node",
            choices=counts,
            default=counts[-1] if counts else None,
            parse=int,
        )
    if values["nodes"] is None:
        values["nodes"] = _ask("How many compute nodes", "--nodes", parse=int)
    if values["os"] is None:
        values["os"] = _ask("Operating system the vendor installs (megahour_os)", "--os", choices=supported())
    if values["fabric"] is None:
        values["fabric"] = _ask("Fabric between the nodes", "--fabric", choices=list(FABRIC_TYPES))
    if values["fabric"] != "none" and values["fabric_interface"] is None:
        values["fabric_interface"] = _ask(
            "Interface NCCL uses on that fabric (for example ib0, ens8f0)", "--fabric-interface"
        )
    if values["nvme"] is None:
        values["nvme"] = _ask(
            "NVMe devices of each node, separated by spaces (for example /dev/nvme0n1 /dev/nvme1n1)",
            "--nvme",
            parse=str.split,
        )
    if values["under_store"] is None:
        values["under_store"] = _ask(
            "Under-store: s3://BUCKET/PREFIX, or an absolute directory every node mounts", "--under-store"
        )
    return ScaffoldAnswers(
        name=args.name,
        gpu_model=values["gpu"],
        gpus_per_node=values["gpus_per_node"],
        nodes=values["nodes"],
        megahour_os=values["os"],
        fabric=values["fabric"],
        fabric_interface=values["fabric_interface"] if values["fabric"] != "none" else None,
        nvme_devices=tuple(values["nvme"]),
        under_store=values["under_store"],
        node_prefix=args.node_prefix,
        controller=args.controller,
        controller_address=args.controller_address,
        first_address=args.first_address,
        cache_size=args.cache_size,
        shared_root=args.shared_root,
        ansible_user=args.ansible_user,
    )


def _cmd_new(args: argparse.Namespace, console: Console) -> int:
    from megahour.atomicio import atomic_write_text
    from megahour.inventory.scaffold import answers_errors, name_error, render
    from megahour.inventory.source import InventoryError, load_snapshot
    from megahour.inventory.validate import render_grouped, validate

    bad_name = name_error(args.name)
    if bad_name is not None:  # before anything is asked: the name makes the path
        raise cliutil.CommandError(bad_name, REFUSED_EXIT)
    target = Path(args.dir) / args.name
    if target.exists() and not target.is_dir():
        raise cliutil.CommandError(
            f"{target} exists and is not a directory; pick another NAME or --dir", REFUSED_EXIT
        )
    if target.exists() and not args.force:
        raise cliutil.CommandError(
            f"{target} already exists; pass --force to overwrite its hosts.yml and group_vars/ files, "
            "or pick another NAME or --dir",
            REFUSED_EXIT,
        )
    answers = _answers(args)
    errors = answers_errors(answers)
    if errors:
        for error in errors[:-1]:
            cliutil.print_error(error)
        raise cliutil.CommandError(errors[-1], REFUSED_EXIT)

    written = []
    for rel, text in render(answers, path=str(target)).items():
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text)
        written.append(str(path))
    try:
        findings = validate(load_snapshot(target))
    except InventoryError as exc:
        raise cliutil.CommandError(f"{target} was written, but {exc}", UNREADABLE_EXIT) from None

    if args.json:
        cliutil.print_json(
            {
                "path": str(target),
                "files": written,
                "valid": not findings,
                "findings": [f.to_dict() for f in findings],
            }
        )
    elif findings:
        for text in render_grouped(findings):
            console.print(cliutil.line(("✗", "red"), " ", text), highlight=False)
        console.print(
            f"{target}: written, with the findings above; fix them, then run "
            f"`megahour inventory validate -i {target}`",
            highlight=False,
            markup=False,
        )
    else:
        console.print(cliutil.line(("✓", "green"), f" {target}: written and valid"), highlight=False)
        steps = []
        if answers.controller_address is None or answers.first_address is None:
            steps.append(f"add ansible_host to the hosts in {target / 'hosts.yml'} that have no address")
        steps += [
            f"megahour inventory validate -i {target}   (after every edit)",
            f"megahour doctor -i {target}   (once the hosts are up: what the deploy needs, read from them)",
            f"ansible-playbook -i {target} playbooks/site.yml   (the deploy)",
        ]
        console.print("next:", highlight=False, markup=False)
        for step in steps:
            console.print(f"  {step}", highlight=False, markup=False)
    return 1 if findings else 0
