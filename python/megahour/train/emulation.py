"""Emulate N nodes on one machine: one network namespace a node, joined by rate-limited veth links.

Every "node" is a network namespace with its own loopback (the intra-node link: ranks of one node talk
over it, unshaped) and one veth pair to a bridge in the root namespace (the fabric). Both ends of each
veth get a ``tbf`` qdisc at ``inter_mbit``, so a node's egress and ingress are capped like a NIC. This
kernel has no ``netem``, so latency is not added; the emulation models bandwidth-bound links.

Ranks run as ``ip netns exec <ns> ...`` processes with ``GLOO_SOCKET_IFNAME`` set to the node's veth:
gloo advertises that address, and a peer in the same namespace reaches it through loopback (the kernel
routes a local address over ``lo``), while a peer in another namespace crosses two capped veths.

:func:`plan` builds the commands (pure, unit-tested); :class:`NodeNetwork` runs them and always tears the
namespaces down. Root and iproute2 are required.
"""

from __future__ import annotations

import ipaddress
import shutil
import subprocess
from dataclasses import dataclass, field

PREFIX = "mh"


class EmulationError(RuntimeError):
    """The emulated network could not be built."""


@dataclass(frozen=True)
class NodeNetworkSpec:
    nodes: int
    inter_mbit: float
    subnet: str = "10.213.77.0/24"
    prefix: str = PREFIX

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise ValueError("the emulation needs at least one node")
        if self.inter_mbit <= 0:
            raise ValueError(f"inter_mbit must be positive, got {self.inter_mbit}")
        if self.nodes > ipaddress.ip_network(self.subnet).num_addresses - 2:
            raise ValueError(f"subnet {self.subnet} has too few addresses for {self.nodes} nodes")

    def namespace(self, node: int) -> str:
        return f"{self.prefix}-node{node}"

    def host_end(self, node: int) -> str:
        return f"{self.prefix}-h{node}"

    def node_end(self, node: int) -> str:
        return f"{self.prefix}-n{node}"

    @property
    def bridge(self) -> str:
        return f"{self.prefix}-br0"

    def address(self, node: int) -> str:
        return str(ipaddress.ip_network(self.subnet)[node + 1])

    @property
    def prefixlen(self) -> int:
        return ipaddress.ip_network(self.subnet).prefixlen


def _tbf(dev: str, mbit: float) -> list[str]:
    # burst must hold at least one timer tick of traffic at the rate (rate / HZ; HZ up to 1000 here)
    burst_bytes = max(32 * 1024, int(mbit * 1e6 / 8 / 250))
    return ["tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", f"{mbit:g}mbit",
            "burst", str(burst_bytes), "latency", "200ms"]  # fmt: skip


def plan(spec: NodeNetworkSpec) -> tuple[list[list[str]], list[list[str]]]:
    """(setup commands, teardown commands) for ``spec``."""
    setup: list[list[str]] = [
        ["ip", "link", "add", spec.bridge, "type", "bridge"],
        ["ip", "link", "set", spec.bridge, "up"],
    ]
    teardown: list[list[str]] = []
    for n in range(spec.nodes):
        ns, host, node = spec.namespace(n), spec.host_end(n), spec.node_end(n)
        setup += [
            ["ip", "netns", "add", ns],
            ["ip", "-n", ns, "link", "set", "lo", "up"],
            ["ip", "link", "add", host, "type", "veth", "peer", "name", node],
            ["ip", "link", "set", node, "netns", ns],
            ["ip", "link", "set", host, "master", spec.bridge],
            ["ip", "link", "set", host, "up"],
            ["ip", "-n", ns, "addr", "add", f"{spec.address(n)}/{spec.prefixlen}", "dev", node],
            ["ip", "-n", ns, "link", "set", node, "up"],
            _tbf(host, spec.inter_mbit),  # into the node
            ["ip", "netns", "exec", ns, *_tbf(node, spec.inter_mbit)],  # out of the node
        ]
        teardown += [["ip", "netns", "del", ns], ["ip", "link", "del", host]]
    teardown.append(["ip", "link", "del", spec.bridge])
    return setup, teardown


@dataclass
class NodeNetwork:
    """A context manager that builds the emulated network and always removes it."""

    spec: NodeNetworkSpec
    _teardown: list[list[str]] = field(default_factory=list)

    def __enter__(self) -> NodeNetwork:
        for tool in ("ip", "tc"):
            if shutil.which(tool) is None:
                raise EmulationError(f"`{tool}` is missing: install iproute2 (apt-get install iproute2)")
        setup, teardown = plan(self.spec)
        self._teardown = teardown
        self._cleanup(quiet=True)  # leftovers of an interrupted run
        try:
            for command in setup:
                result = subprocess.run(command, capture_output=True, text=True)
                if result.returncode != 0:
                    raise EmulationError(
                        f"`{' '.join(command)}` failed: {result.stderr.strip()} (the emulation needs root "
                        "and network namespaces)"
                    )
        except BaseException:
            self._cleanup(quiet=True)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._cleanup(quiet=True)

    def _cleanup(self, quiet: bool) -> None:
        for command in self._teardown:
            subprocess.run(command, capture_output=quiet, check=False)

    def command(self, node: int, argv: list[str]) -> list[str]:
        """``argv`` run inside ``node``'s namespace."""
        return ["ip", "netns", "exec", self.spec.namespace(node), *argv]
