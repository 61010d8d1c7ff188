"""The inventory's ``megahour_fabric``: its fields, their problems, and the environment NCCL needs from it.

Pure logic: validation reports the problems before any host is touched, and the fabric role renders
``nccl_env`` into the file every training job sources (``/etc/megahour/fabric.env``), so what validation
accepts is exactly what the role can render.

    megahour_fabric:
      type: roce                 # infiniband | roce | ethernet | none
      interface: bond0           # the NIC (or bond, or VLAN) NCCL bootstraps over; not needed for none
      hcas: [mlx5_0, mlx5_1]     # infiniband/roce: the RDMA devices NCCL may use (default: all it finds)
      gid_index: 3               # roce: the RoCEv2 GID (default: NCCL picks one)
      traffic_class: 106         # roce: the lossless class the switches give RDMA (default: none)
      rate_gbps: 400             # infiniband/roce: each RDMA port's expected rate (default: not checked)
      nccl_env: {NCCL_IB_QPS_PER_CONNECTION: 4}   # yours, last; a null drops a derived one
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

FABRIC_TYPES = ("infiniband", "roce", "ethernet", "none")
RDMA_TYPES = ("infiniband", "roce")
FIELDS = ("type", "interface", "hcas", "gid_index", "traffic_class", "rate_gbps", "nccl_env")
# What a Linux interface name or an RDMA device name may hold (IFNAMSIZ is 16 with the NUL).
_IFNAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,14}$")
_HCA = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(:[0-9]+)?$")
_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
VARIABLE = "megahour_fabric"


@dataclass(frozen=True)
class FabricProblem:
    variable: str  # e.g. megahour_fabric.gid_index
    message: str
    fix: str


@dataclass(frozen=True)
class Fabric:
    type: str
    interface: str | None = None
    hcas: tuple[str, ...] = ()
    gid_index: int | None = None
    traffic_class: int | None = None
    rate_gbps: int | None = None
    nccl_env: Mapping[str, str | None] = field(default_factory=dict)

    @property
    def rdma(self) -> bool:
        return self.type in RDMA_TYPES


def _int_in(value: Any, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def problems(value: Any) -> list[FabricProblem]:
    """Everything wrong with a ``megahour_fabric`` value, each naming the field and the fix; [] when valid."""
    if not isinstance(value, Mapping) or value.get("type") not in FABRIC_TYPES:
        return [
            FabricProblem(
                f"{VARIABLE}.type",
                f"must be one of {', '.join(FABRIC_TYPES)} (got {value!r})",
                "set megahour_fabric: {type: infiniband, interface: ib0} (or roce/ethernet, or none "
                "for a single-node test box) in group_vars/compute.yml",
            )
        ]
    kind = value["type"]
    found: list[FabricProblem] = []

    def add(name: str, message: str, fix: str) -> None:
        found.append(FabricProblem(f"{VARIABLE}.{name}", message, fix))

    unknown = sorted(set(value) - set(FIELDS))
    if unknown:
        fields = ", ".join(FIELDS)
        add(unknown[0], f"is not a fabric field (fields: {fields})", f"remove or rename {unknown[0]}")
    interface = value.get("interface")
    if kind != "none" and not interface:
        add(
            "interface",
            f"a {kind} fabric needs its interface name",
            "set megahour_fabric.interface to the NIC NCCL should use (for example ib0 or ens8f0)",
        )
    elif interface and not (isinstance(interface, str) and _IFNAME.match(interface)):
        add("interface", f"{interface!r} is not a network interface name", "use the name `ip link` shows")
    rdma_only = [name for name in ("hcas", "gid_index", "traffic_class", "rate_gbps") if name in value]
    if kind not in RDMA_TYPES and rdma_only:
        add(rdma_only[0], f"applies to infiniband or roce fabrics, not {kind}", f"remove {rdma_only[0]}")
    elif kind == "infiniband" and ("gid_index" in value or "traffic_class" in value):
        name = "gid_index" if "gid_index" in value else "traffic_class"
        add(name, "applies to roce fabrics only (InfiniBand routes by LID)", f"remove {name}")
    hcas = value.get("hcas", [])
    if not isinstance(hcas, list) or not all(isinstance(h, str) and _HCA.match(h) for h in hcas):
        add("hcas", f"must be a list of RDMA device names (got {hcas!r})", "list them as `ibv_devices` shows")
    if "gid_index" in value and not _int_in(value["gid_index"], 0, 255):
        add(
            "gid_index",
            f"must be a whole number 0-255 (got {value['gid_index']!r})",
            "use a RoCEv2 GID that show_gids lists",
        )
    if "traffic_class" in value and not _int_in(value["traffic_class"], 0, 255):
        add(
            "traffic_class",
            f"must be a whole number 0-255 (got {value['traffic_class']!r})",
            "ask the vendor which class their switches keep lossless (often 106)",
        )
    if "rate_gbps" in value and not _int_in(value["rate_gbps"], 1, 10_000):
        add("rate_gbps", f"must be a whole number of Gb/s (got {value['rate_gbps']!r})", "for NDR use 400")
    env = value.get("nccl_env", {})
    if not isinstance(env, Mapping):
        add("nccl_env", f"must be a mapping NAME: value (got {env!r})", "write it as {NCCL_IB_TIMEOUT: 22}")
    else:
        for name, setting in env.items():
            if not (isinstance(name, str) and _ENV_NAME.match(name)):
                add("nccl_env", f"{name!r} is not an environment variable name", "use A-Z, 0-9 and _")
            elif isinstance(setting, (Mapping, list)):
                add(f"nccl_env.{name}", f"must be a single value (got {setting!r})", "write it as one string")
    return found


def parse(value: Any) -> Fabric:
    """The fabric of a valid ``megahour_fabric``; ValueError naming the first problem otherwise."""
    found = problems(value)
    if found:
        first = found[0]
        raise ValueError(f"{first.variable}: {first.message}. Fix: {first.fix}")
    env = value.get("nccl_env") or {}
    return Fabric(
        type=value["type"],
        interface=value.get("interface") or None,
        hcas=tuple(value.get("hcas") or ()),
        gid_index=value.get("gid_index"),
        traffic_class=value.get("traffic_class"),
        rate_gbps=value.get("rate_gbps"),
        nccl_env={str(k): (None if v is None else _text(v)) for k, v in env.items()},
    )


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def nccl_env(fabric: Fabric) -> dict[str, str]:
    """The environment training jobs need on this fabric, in the order it is written.

    RDMA fabrics keep NCCL on its IB transport (verbs serve RoCE too) and name the HCAs exactly (the ``=``
    prefix: ``mlx5_1`` alone would also match ``mlx5_10``); the socket interface carries NCCL's bootstrap,
    and torch's gloo uses the same one. Ethernet and none turn the IB transport off, so NCCL does not
    pick a stray RDMA device. The inventory's ``nccl_env`` comes last: it overrides, and a null drops.
    """
    env: dict[str, str] = {}
    if fabric.rdma:
        env["NCCL_IB_DISABLE"] = "0"
        if fabric.hcas:
            env["NCCL_IB_HCA"] = "=" + ",".join(fabric.hcas)
        if fabric.gid_index is not None:
            env["NCCL_IB_GID_INDEX"] = str(fabric.gid_index)
        if fabric.traffic_class is not None:
            env["NCCL_IB_TC"] = str(fabric.traffic_class)
    else:
        env["NCCL_IB_DISABLE"] = "1"
    if fabric.interface:
        env["NCCL_SOCKET_IFNAME"] = "=" + fabric.interface
        env["GLOO_SOCKET_IFNAME"] = fabric.interface
    for name, setting in fabric.nccl_env.items():
        if setting is None:
            env.pop(name, None)
        else:
            env[name] = setting
    return env


# The sysfs link_layer of each RDMA fabric's ports (megahour.health.rdma).
LINK_LAYERS = {"infiniband": "InfiniBand", "roce": "Ethernet"}


def health_rule(fabric: Fabric) -> dict[str, Any] | None:
    """What the health gate checks of the node's RDMA ports (health.json's ``rdma``); None off RDMA.

    The HCAs NCCL is told to use are the ports checked (all of them when the inventory names none), and
    ``rate_gbps`` is the slowest link allowed.
    """
    if not fabric.rdma:
        return None
    return {
        "link_layer": LINK_LAYERS[fabric.type],
        "devices": list(fabric.hcas),
        "min_rate_gbps": fabric.rate_gbps,
    }


def env_file(env: Mapping[str, str], source: str) -> str:
    """The text of the file jobs ``source``: one ``export NAME=value`` a line, each value shell-quoted."""
    lines = [f"# The fabric's environment for training jobs, from {source}. Sourced by the sbatch script."]
    lines += [f"export {name}={shlex.quote(value)}" for name, value in env.items()]
    return "\n".join(lines) + "\n"
