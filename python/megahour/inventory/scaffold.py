"""A new vendor inventory from a few answers: `megahour inventory new NAME` (pure: no I/O).

``ScaffoldAnswers`` holds what a vendor tells a lab (GPU model and count, nodes, OS, fabric, NVMe devices,
under-store, login user). ``answers_errors`` lists the unusable answers, one line each naming the CLI flag
and the fix: it checks what only the scaffold knows (names, addresses, devices), then renders the
inventory, builds the snapshot Ansible would and runs ``validate`` on it, so the rules stay in one place
and answers it accepts give an inventory with no findings. ``render`` returns the commented YAML files, in
the layout of inventories/example-baremetal-h100; every value is written by ``yaml.safe_dump`` and the
result is parsed back before it is returned.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from megahour.inventory import source
from megahour.inventory.fabric import FABRIC_TYPES
from megahour.inventory.platforms import supported
from megahour.inventory.profiles import VARIABLE as PROFILES_VARIABLE
from megahour.inventory.profiles import known_models, profile_for
from megahour.inventory.validate import (
    CLUSTER_GROUP,
    COMPUTE_GROUP,
    CONTROLLER_GROUP,
    DEFAULT_SHARED_ROOT,
    NODE_NAME_RE,
    SERVICE_GROUPS,
    UFS_SCHEMES,
    group_findings,
    unrendered,
    validate,
)

HOSTS = "hosts.yml"
ALL_VARS = "group_vars/all.yml"
COMPUTE_VARS = "group_vars/compute.yml"
FILES = (HOSTS, ALL_VARS, COMPUTE_VARS)
DOCS = "docs/onboarding.md"
DEFAULT_NODE_PREFIX = "gpu"
DEFAULT_CONTROLLER = "head01"
DEFAULT_CACHE_SIZE = "3TB"
DEFAULT_USER = "root"
# An inventory directory's name: it also becomes megahour_vendor.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
# Linux interface names: at most 15 characters (IFNAMSIZ - 1), no spaces or slashes.
INTERFACE_RE = re.compile(r"^[A-Za-z0-9_.:@-]{1,15}$")
USER_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*\$?$")
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOSTNAME_RE = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*$")
LAST_HOST_OCTET = 254
# The inventory's groups (and Ansible's own): a host may not share a name with one.
GROUPS = ("all", "ungrouped", CLUSTER_GROUP, CONTROLLER_GROUP, COMPUTE_GROUP, *SERVICE_GROUPS)


@dataclass(frozen=True)
class ScaffoldAnswers:
    name: str  # the inventory directory (and megahour_vendor)
    gpu_model: str  # megahour_gpu.model: a built-in profile (profiles.known_models())
    gpus_per_node: int  # megahour_gpu.count
    nodes: int  # compute nodes
    megahour_os: str  # one of platforms.supported()
    fabric: str  # one of validate.FABRIC_TYPES
    fabric_interface: str | None  # the NIC NCCL uses; none for fabric "none"
    nvme_devices: tuple[str, ...]  # absolute paths; cache dir K is /mnt/nvmeK/alluxio
    under_store: str  # s3://BUCKET/PREFIX or an absolute directory every node mounts
    node_prefix: str = DEFAULT_NODE_PREFIX  # compute nodes are PREFIX001, PREFIX002, ...
    controller: str = DEFAULT_CONTROLLER
    controller_address: str | None = None  # an IP address or DNS name
    first_address: str | None = None  # IPv4 of the first compute node; the last octet counts up
    cache_size: str = DEFAULT_CACHE_SIZE  # per NVMe device
    shared_root: str = DEFAULT_SHARED_ROOT
    ansible_user: str = DEFAULT_USER  # not root: ansible_become: true


# The flag (or argument) each answer comes from, in the order errors are listed.
FLAGS: dict[str, str] = {
    "name": "NAME",
    "gpu_model": "--gpu",
    "gpus_per_node": "--gpus-per-node",
    "nodes": "--nodes",
    "node_prefix": "--node-prefix",
    "controller": "--controller",
    "controller_address": "--controller-address",
    "first_address": "--first-address",
    "megahour_os": "--os",
    "fabric": "--fabric",
    "fabric_interface": "--fabric-interface",
    "nvme_devices": "--nvme",
    "cache_size": "--cache-size",
    "shared_root": "--shared-root",
    "under_store": "--under-store",
    "ansible_user": "--ansible-user",
}


# --- names and addresses ------------------------------------------------------------------------------


def node_names(answers: ScaffoldAnswers) -> list[str]:
    """PREFIX001, PREFIX002, ...: three digits, more when there are over 999 nodes."""
    width = max(3, len(str(answers.nodes)))
    return [f"{answers.node_prefix}{i:0{width}d}" for i in range(1, answers.nodes + 1)]


def compute_addresses(answers: ScaffoldAnswers) -> list[str] | None:
    """The compute nodes' addresses: the first one's last octet counted up, one per node; None without
    a first address. Raises ValueError on an address ``answers_errors`` refuses."""
    if answers.first_address is None:
        return None
    first = ipaddress.IPv4Address(answers.first_address)
    return [str(first + i) for i in range(answers.nodes)]


def cache_dirs(answers: ScaffoldAnswers) -> list[dict[str, str]]:
    return [
        {"path": f"/mnt/nvme{k}/alluxio", "size": answers.cache_size}
        for k in range(len(answers.nvme_devices))
    ]


# --- errors -------------------------------------------------------------------------------------------


def _error(field: str, message: str, fix: str) -> str:
    return f"{FLAGS[field]}: {message}. Fix: {fix}"


_NAME_FIX = "use letters, digits, '.', '-' and '_', starting with a letter or digit (for example vendor4)"


def _fixes(answers: ScaffoldAnswers) -> dict[str, str]:
    profile = profile_for(answers.gpu_model)
    shapes = ", ".join(map(str, profile.counts_per_node)) if profile is not None else "the profile's counts"
    return {
        "name": _NAME_FIX,
        "gpu_model": f"pass --gpu one of {', '.join(known_models())}; for a GPU without a built-in profile, "
        f"scaffold with the nearest one, then define yours in {PROFILES_VARIABLE} in {ALL_VARS} and set "
        f"megahour_gpu.model in {COMPUTE_VARS} ({DOCS}, GPU profiles)",
        "gpus_per_node": f"pass --gpus-per-node {'one of ' if ', ' in shapes else ''}{shapes}",
        "nodes": "pass --nodes 1 or more",
        "node_prefix": "pass --node-prefix of letters, digits, '-' and '_' (the nodes become PREFIX001, ...)",
        "controller": "pass --controller a short host name of letters, digits, '-' and '_', "
        "not one of the compute nodes' names",
        "controller_address": "pass --controller-address an IP address or DNS name, or leave it out and "
        f"add ansible_host to {HOSTS} later",
        "first_address": "pass --first-address an IPv4 address whose last octet leaves room for every node, "
        f"or leave it out and add ansible_host to {HOSTS} later",
        "megahour_os": f"pass --os one of {', '.join(supported())} (ask the vendor for one of them)",
        "fabric": f"pass --fabric one of {', '.join(FABRIC_TYPES)}",
        "fabric_interface": "pass --fabric-interface with the NIC NCCL should use "
        "(for example ib0 or ens8f0)",
        "nvme_devices": "pass --nvme once per NVMe device, as an absolute path "
        "(for example --nvme /dev/nvme0n1 --nvme /dev/nvme1n1)",
        "cache_size": "pass --cache-size as a whole number with KB, MB, GB or TB (for example 3TB)",
        "shared_root": "pass --shared-root the absolute directory every node mounts the shared filesystem at "
        f"(for example {DEFAULT_SHARED_ROOT})",
        "under_store": f"pass --under-store s3://BUCKET/PREFIX ({' or '.join(UFS_SCHEMES)}; "
        "credentials go in alluxio_site_config) or an absolute directory every node mounts",
        "ansible_user": "pass --ansible-user the user Ansible logs in as (root, or a user with sudo)",
    }


def name_error(name: str) -> str | None:
    """The error line for an unusable inventory name, or None."""
    if NAME_RE.match(name):
        return None
    return _error("name", f"{name!r} is not a usable directory name", _NAME_FIX)


def _own_errors(answers: ScaffoldAnswers, fixes: dict[str, str]) -> dict[str, str]:
    """What validation of the rendered inventory cannot see: names, addresses, the devices' list."""
    errors: dict[str, str] = {}

    def add(field: str, message: str) -> None:
        errors.setdefault(field, _error(field, message, fixes[field]))

    for field in FLAGS:
        value = getattr(answers, field)
        values = value if isinstance(value, tuple) else (value,)
        if any(unrendered(v) for v in values):
            add(field, f"{value!r} holds a Jinja expression, which Ansible would evaluate")
    bad_name = name_error(answers.name)
    if bad_name is not None:
        errors.setdefault("name", bad_name)
    if answers.nodes < 1:
        add("nodes", f"{answers.nodes} is not a positive number of nodes")
    if not NODE_NAME_RE.match(answers.node_prefix):
        add("node_prefix", f"{answers.node_prefix!r} does not make valid Slurm node names")
    if not NODE_NAME_RE.match(answers.controller):
        add("controller", f"{answers.controller!r} is not a valid Slurm node name")
    elif answers.controller in GROUPS:
        add("controller", f"{answers.controller!r} is the name of a group of the inventory")
    elif answers.nodes >= 1 and answers.controller in node_names(answers):
        add("controller", f"{answers.controller!r} is also the name of a compute node")
    address = answers.controller_address
    if address is not None and not HOSTNAME_RE.match(address):
        try:
            ipaddress.ip_address(address)
        except ValueError:
            add("controller_address", f"{address!r} is neither an IP address nor a DNS name")
    if answers.first_address is not None:
        try:
            first = ipaddress.IPv4Address(answers.first_address)
        except ValueError:
            add("first_address", f"{answers.first_address!r} is not an IPv4 address")
        else:
            last_octet = int(str(first).rsplit(".", 1)[1]) + max(answers.nodes, 1) - 1
            if last_octet > LAST_HOST_OCTET:
                add(
                    "first_address",
                    f"{answers.nodes} nodes from {first} would run past .{LAST_HOST_OCTET}",
                )
            elif address is not None and address in (compute_addresses(answers) or []):
                add("controller_address", f"{address} is also a compute node's address")
    if (
        answers.fabric != "none"
        and answers.fabric_interface
        and not INTERFACE_RE.match(answers.fabric_interface)
    ):
        add("fabric_interface", f"{answers.fabric_interface!r} is not a network interface name")
    if not answers.nvme_devices:
        add("nvme_devices", "no NVMe device was given; the cache tier needs at least one")
    else:
        duplicates = sorted({d for d in answers.nvme_devices if answers.nvme_devices.count(d) > 1})
        if duplicates:
            add("nvme_devices", f"{', '.join(duplicates)} is given more than once")
    if not USER_RE.match(answers.ansible_user):
        add("ansible_user", f"{answers.ansible_user!r} is not a user name")
    return errors


def _field_of(variable: str, host: str | None, answers: ScaffoldAnswers) -> str | None:
    """The answer a validation finding's variable comes from."""
    if variable == "inventory_hostname":
        return "controller" if host == answers.controller else "node_prefix"
    if variable == "megahour_cache_dirs":
        return "nvme_devices"  # no directories: no devices
    if variable.startswith("megahour_cache_dirs["):
        return "cache_size"  # the paths are the scaffold's own
    return {
        "megahour_gpu.model": "gpu_model",
        "megahour_gpu.count": "gpus_per_node",
        "megahour_fabric.type": "fabric",
        "megahour_fabric.interface": "fabric_interface",
        "megahour_nvme_devices": "nvme_devices",
        "megahour_os": "megahour_os",
        "megahour_shared_root": "shared_root",
        "alluxio_root_ufs": "under_store",
        "ansible_become": "ansible_user",
        "ansible_user": "ansible_user",
        f"groups.{COMPUTE_GROUP}": "nodes",
    }.get(variable)


def answers_errors(answers: ScaffoldAnswers) -> list[str]:
    """One line per unusable answer, ``FLAG: problem. Fix: what to pass``; empty when the inventory
    ``render`` writes from them has no validation findings."""
    fixes = _fixes(answers)
    errors = _own_errors(answers, fixes)
    # Addresses do not change what validation reads (and a bad one could not be rendered); every compute
    # node has the same variables, so one stands for all, however many were asked for.
    checked = replace(answers, controller_address=None, first_address=None, nodes=1)
    leftovers: list[str] = []
    for group in group_findings(validate(snapshot(render(checked)))):
        field = _field_of(group.variable, group.hosts[0] if group.hosts else None, answers)
        if field is None:  # a rule this module does not know yet: still an error, in validation's words
            leftovers.append(group.render())
        elif field not in errors:
            errors[field] = _error(field, group.message, fixes[field])
    return [errors[field] for field in FLAGS if field in errors] + leftovers


# --- render -------------------------------------------------------------------------------------------


# What YAML (1.1, as PyYAML and Ansible read it) ends a line at: a comment or a plain scalar stops there.
_LINE_BREAKS = "\n\r\x85\u2028\u2029"


def _yaml(value: Any) -> str:
    """``value`` as one line of YAML (a flow collection or a quoted scalar where needed)."""
    import yaml  # here, not at the top: `megahour --help` reads this module's defaults

    text = yaml.safe_dump(value, default_flow_style=True, width=2**30, allow_unicode=True, sort_keys=False)
    text = text.removesuffix("\n").removesuffix("\n...")
    if any(c in text for c in _LINE_BREAKS):  # a string with line breaks: double quotes escape them
        text = (
            yaml.safe_dump(value, default_style='"', default_flow_style=True, width=2**30)
            .removesuffix("\n")
            .removesuffix("\n...")
        )
    return text


def _hosts_block(indent: str, hosts: list[str], addresses: list[str] | None) -> list[str]:
    if not hosts:
        return [f"{indent}hosts: {{}}"]
    lines = [f"{indent}hosts:"]
    for i, host in enumerate(hosts):
        lines.append(f"{indent}  {_yaml(host)}:")
        if addresses is not None:
            lines.append(f"{indent}    ansible_host: {_yaml(addresses[i])}")
    return lines


def documents(answers: ScaffoldAnswers) -> dict[str, Any]:
    """The data each file of ``render`` holds (what its text parses to)."""
    nodes = node_names(answers)
    addresses = compute_addresses(answers)
    controller_vars = (
        {"ansible_host": answers.controller_address} if answers.controller_address is not None else None
    )
    compute = {h: ({"ansible_host": addresses[i]} if addresses else None) for i, h in enumerate(nodes)}
    hosts = {
        "all": {
            "children": {
                CLUSTER_GROUP: {
                    "children": {
                        CONTROLLER_GROUP: {"hosts": {answers.controller: controller_vars}},
                        COMPUTE_GROUP: {"hosts": compute},
                    }
                },
                **{group: {"hosts": {answers.controller: None}} for group in SERVICE_GROUPS},
            }
        }
    }
    all_vars: dict[str, Any] = {
        "megahour_vendor": answers.name,
        "megahour_os": answers.megahour_os,
        "ansible_user": answers.ansible_user,
    }
    if answers.ansible_user != "root":
        all_vars["ansible_become"] = True
    all_vars["megahour_shared_root"] = answers.shared_root
    all_vars["alluxio_root_ufs"] = answers.under_store
    fabric: dict[str, Any] = {"type": answers.fabric}
    if answers.fabric != "none" and answers.fabric_interface:
        fabric["interface"] = answers.fabric_interface
    compute_vars = {
        "megahour_gpu": {"model": answers.gpu_model, "count": answers.gpus_per_node},
        "megahour_fabric": fabric,
        "megahour_nvme_devices": list(answers.nvme_devices),
        "megahour_cache_dirs": cache_dirs(answers),
    }
    return {HOSTS: hosts, ALL_VARS: all_vars, COMPUTE_VARS: compute_vars}


def _render_hosts(answers: ScaffoldAnswers, path: str) -> str:
    nodes = node_names(answers)
    addresses = compute_addresses(answers)
    controller = _yaml(answers.controller)
    profile = profile_for(answers.gpu_model)
    gpus = f"{answers.gpus_per_node} x {profile.model if profile else _yaml(answers.gpu_model)} each"
    lines = [
        "---",
        f"# Inventory {_yaml(answers.name)}, written by `megahour inventory new`",
        f"# ({DOCS}, Scaffold an inventory).",
        "# The host names are the Slurm node names; ansible_host is the address Ansible reaches a host at.",
        "# The GPUs, fabric and NVMe devices are in group_vars/compute.yml; the OS, login and under-store",
        "# in group_vars/all.yml. Check it after every edit, then deploy:",
        f"#   megahour inventory validate -i {path}",
        f"#   ansible-playbook -i {path} playbooks/site.yml",
        "all:",
        "  children:",
        f"    # Every play of playbooks/site.yml targets {CLUSTER_GROUP}: the controller and the GPU nodes.",
        f"    {CLUSTER_GROUP}:",
        "      children:",
        "        # The Slurm controller (slurmctld, slurmdbd, the cache tier's master): exactly one host.",
        f"        {CONTROLLER_GROUP}:",
    ]
    if answers.controller_address is None:
        lines += [
            "          # No address was given: add `ansible_host: <address>` under the host (or make its",
            "          # name resolve on the control node).",
        ]
    lines.append("          hosts:")
    lines.append(f"            {controller}:")
    if answers.controller_address is not None:
        lines.append(f"              ansible_host: {_yaml(answers.controller_address)}")
    lines += [
        f"        # The GPU nodes: {len(nodes)} of them, {gpus}.",
        f"        {COMPUTE_GROUP}:",
    ]
    if addresses is None and nodes:
        lines += [
            "          # No addresses were given: add `ansible_host: <address>` under each host (or make",
            "          # their names resolve on the control node).",
        ]
    lines += _hosts_block("          ", nodes, addresses)
    lines += [
        "    # The ClickHouse warehouse (roles/warehouse). The head node serves a few hundred million",
        "    # episode rows; give it a host of its own, and a data disk (warehouse_data_dir), beyond that.",
        "    warehouse:",
        "      hosts:",
        f"        {controller}:",
        "    # Airflow (roles/airflow): PostgreSQL and the Airflow services. They only submit Slurm jobs",
        "    # (partition `ingest`) and wait on them, so the head node carries them; every cluster host",
        "    # also needs the shared filesystem at megahour_shared_root (group_vars/all.yml).",
        "    airflow:",
        "      hosts:",
        f"        {controller}:",
    ]
    return "\n".join(lines) + "\n"


def _render_all(answers: ScaffoldAnswers, path: str) -> str:
    data = documents(answers)[ALL_VARS]
    lines = [
        "---",
        f"# What every host of inventory {_yaml(answers.name)} shares, written by `megahour inventory new`.",
        f"# {DOCS} explains each setting; `megahour inventory validate -i {path}` checks them.",
        "",
        "# This inventory's name, shown in reports.",
        f"megahour_vendor: {_yaml(data['megahour_vendor'])}",
        "# The image the vendor installs on every node: the roles' package names and the nodes' Python",
        f"# follow it. One of {', '.join(supported())} ({DOCS}, operating systems).",
        f"megahour_os: {_yaml(data['megahour_os'])}",
    ]
    if "ansible_become" in data:
        lines += [
            "# The user Ansible logs in as. It is not root, so it needs sudo and become is on: every role",
            "# installs packages and services as root.",
            f"ansible_user: {_yaml(data['ansible_user'])}",
            "ansible_become: true",
        ]
    else:
        lines += [
            "# The user Ansible logs in as. Another user needs sudo, and ansible_become: true beside it.",
            f"ansible_user: {_yaml(data['ansible_user'])}",
        ]
    lines += [
        "# Where every host mounts the shared filesystem (training runs, their environments, Airflow's",
        "# files). Mount it on every host before the deploy.",
        f"megahour_shared_root: {_yaml(data['megahour_shared_root'])}",
    ]
    if answers.under_store.startswith("/"):
        lines += [
            "# The cache tier's under-store (roles/alluxio): the directory the episode store lives in,",
            "# mounted at the same path on every host.",
        ]
    else:
        lines += [
            "# The cache tier's under-store (roles/alluxio): the bucket the episode store lives in. Its",
            "# credentials go in alluxio_site_config (alluxio.master.mount.table.root.option.s3a.*),",
            "# from a vault.",
        ]
    lines.append(f"alluxio_root_ufs: {_yaml(data['alluxio_root_ufs'])}")
    return "\n".join(lines) + "\n"


def _render_compute(answers: ScaffoldAnswers) -> str:
    data = documents(answers)[COMPUTE_VARS]
    profile = profile_for(answers.gpu_model)
    gres = (
        f"; Slurm advertises these as Gres=gpu:{profile.gres_type}:{answers.gpus_per_node}"
        if profile is not None
        else ""
    )
    lines = [
        "---",
        f"# What the GPU nodes (group {COMPUTE_GROUP}) of inventory {_yaml(answers.name)} have, written by",
        f"# `megahour inventory new`. {DOCS} explains each setting.",
        "",
        "# The GPU model and how many each node has. The model names a GPU profile: the names nvidia-smi",
        f"# prints, the oldest driver branch, the Slurm GRES type{gres}.",
        f"# A GPU without a built-in profile: define it in {PROFILES_VARIABLE} ({DOCS}, GPU profiles).",
        "megahour_gpu:",
        f"  model: {_yaml(data['megahour_gpu']['model'])}",
        f"  count: {_yaml(data['megahour_gpu']['count'])}",
        f"# The network NCCL uses between nodes (one of {', '.join(FABRIC_TYPES)}; none only for a single",
        "# node) and the interface it goes through.",
        "megahour_fabric:",
        f"  type: {_yaml(data['megahour_fabric']['type'])}",
    ]
    if "interface" in data["megahour_fabric"]:
        lines.append(f"  interface: {_yaml(data['megahour_fabric']['interface'])}")
    lines.append("# The NVMe block devices of each node, for the cache tier.")
    if data["megahour_nvme_devices"]:
        lines.append("megahour_nvme_devices:")
        lines += [f"  - {_yaml(device)}" for device in data["megahour_nvme_devices"]]
    else:
        lines.append("megahour_nvme_devices: []")
    lines += [
        "# The NVMe filesystems (formatted and mounted beforehand) Alluxio's paged store uses, one per",
        "# device in the order above (the first on /mnt/nvme0), and how much of each it may fill",
        "# (KB, MB, GB or TB).",
    ]
    if data["megahour_cache_dirs"]:
        lines.append("megahour_cache_dirs:")
        lines += [f"  - {_yaml(entry)}" for entry in data["megahour_cache_dirs"]]
    else:
        lines.append("megahour_cache_dirs: []")
    return "\n".join(lines) + "\n"


def render(answers: ScaffoldAnswers, *, path: str | None = None) -> dict[str, str]:
    """The inventory's files, by path inside its directory: hosts.yml, group_vars/all.yml and
    group_vars/compute.yml. ``path`` is the directory the comments' commands name (inventories/NAME)."""
    path = _yaml(path or f"inventories/{answers.name}")  # one line, whatever it holds
    files = {
        HOSTS: _render_hosts(answers, path),
        ALL_VARS: _render_all(answers, path),
        COMPUTE_VARS: _render_compute(answers),
    }
    import yaml

    expected = documents(answers)
    for name, text in files.items():
        if yaml.safe_load(text) != expected[name]:  # pragma: no cover - a bug in this module
            raise AssertionError(f"the rendered {name} does not parse back to its values")
    return files


# --- the snapshot Ansible would build ----------------------------------------------------------------


def listing(files: Mapping[str, str]) -> dict[str, Any]:
    """What `ansible-inventory --list` prints for rendered ``files`` (a hosts file whose groups nest
    under ``all: children:``, and group_vars/GROUP.yml files): groups with their hosts and children,
    and each host's variables (all, then the other groups, then the host's own)."""
    import yaml

    hosts_doc = yaml.safe_load(files[HOSTS]) or {}
    out: dict[str, Any] = {"_meta": {"hostvars": {}}}
    inline: dict[str, dict[str, Any]] = {}

    def walk(group: str, entry: Mapping[str, Any] | None) -> None:
        entry = entry or {}
        node = out.setdefault(group, {})
        hosts = entry.get("hosts") or {}
        if hosts:
            node["hosts"] = list(dict.fromkeys([*node.get("hosts", []), *hosts]))
        for host, hv in hosts.items():
            inline.setdefault(host, {}).update(hv or {})
        children = entry.get("children") or {}
        if children:
            node["children"] = list(dict.fromkeys([*node.get("children", []), *children]))
        for child, sub in children.items():
            walk(child, sub)

    walk("all", hosts_doc.get("all"))
    snap_groups = source.snapshot_from_listing(out)["groups"]
    group_vars = {
        name.removeprefix("group_vars/").rsplit(".", 1)[0]: yaml.safe_load(text) or {}
        for name, text in files.items()
        if name.startswith("group_vars/")
    }
    order = ["all", *sorted(g for g in group_vars if g != "all")]
    for host in snap_groups.get("all", []):
        hv: dict[str, Any] = {}
        for group in order:
            if host in snap_groups.get(group, []) or group == "all":
                hv.update(group_vars.get(group, {}))
        hv.update(inline.get(host, {}))
        out["_meta"]["hostvars"][host] = hv
    return out


def snapshot(files: Mapping[str, str]) -> dict[str, Any]:
    """The validation snapshot of rendered ``files``, as ``source.load_snapshot`` would build it."""
    return source.snapshot_from_listing(listing(files))
