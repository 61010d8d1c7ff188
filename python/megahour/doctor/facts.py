"""Parse the probe's output (``probe.sh``) into what one host has. Pure: text in, ``HostFacts`` out.

Every section keeps its exit code: a command that is missing (127) or failed is ``None`` in the facts
and its text is kept, so a check can say why it could not look. Parsers never raise on bad text; a
section that does not parse is recorded in ``unreadable`` and the checks that need it fail closed.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field

from megahour.health import smi
from megahour.health.rdma import PORT_FILES, Port, UnreadablePort, parse_port

MARKER = re.compile(r"^@@megahour-doctor (?P<name>[a-z_]+) rc=(?P<rc>-?\d+)$")
GPU_FIELDS = ["index", "name", "driver_version", "memory.total"]
MISSING_COMMAND = 127


@dataclass(frozen=True)
class Section:
    rc: int
    text: str

    @property
    def ok(self) -> bool:
        return self.rc == 0


@dataclass(frozen=True)
class Gpu:
    index: str
    name: str
    driver_version: str
    memory_mib: int | None


@dataclass(frozen=True)
class Link:
    name: str
    operstate: str
    flags: tuple[str, ...]

    @property
    def up(self) -> bool:
        # Virtual links (bonds without carrier detection, some IPoIB drivers) report UNKNOWN while up.
        if self.operstate == "UP":
            return True
        return self.operstate == "UNKNOWN" and "UP" in self.flags and "LOWER_UP" in self.flags


@dataclass(frozen=True)
class BlockDevice:
    name: str
    path: str
    type: str
    size: int | None
    fstype: str | None
    mountpoint: str | None
    parent: str | None  # the path of the disk a partition belongs to


@dataclass(frozen=True)
class Mount:
    target: str
    source: str
    fstype: str


@dataclass
class HostFacts:
    sections: dict[str, Section] = field(default_factory=dict)
    os_release: dict[str, str] | None = None
    arch: str | None = None
    python: tuple[int, ...] | None = None
    gpus: list[Gpu] | None = None
    links: dict[str, Link] | None = None
    # RDMA ports as sysfs shows them, and one message per port that does not read as the kernel writes it.
    rdma_ports: list[Port] | None = None
    rdma_errors: list[str] = field(default_factory=list)
    block_devices: list[BlockDevice] | None = None
    mounts: list[Mount] | None = None
    timesync: dict[str, str] | None = None
    root_free_kib: int | None = None
    paths: dict[str, str] = field(default_factory=dict)  # path -> dir, other or missing
    version: str | None = None
    clock: float | None = None
    unreadable: dict[str, str] = field(default_factory=dict)

    @property
    def platform(self) -> str | None:
        """``<ID>-<VERSION_ID>`` (debian-12, ubuntu-24.04): the form megahour_os takes."""
        if not self.os_release or "ID" not in self.os_release:
            return None
        return f"{self.os_release['ID']}-{self.os_release.get('VERSION_ID', '?')}"

    def mount_of(self, path: str) -> Mount | None:
        """The mount ``path`` lives on: the longest mount target that contains it (the last one listed of
        equal targets, which is the one on top)."""
        best, best_len = None, -1
        for mount in self.mounts or []:
            target = mount.target.rstrip("/") or "/"
            inside = target == "/" or path == target or path.startswith(target + "/")
            if inside and len(target) >= best_len:
                best, best_len = mount, len(target)
        return best

    def is_mount_point(self, path: str) -> bool:
        path = path.rstrip("/") or "/"
        return any((m.target.rstrip("/") or "/") == path for m in self.mounts or [])


def split_sections(text: str) -> dict[str, Section]:
    sections: dict[str, Section] = {}
    name, rc, lines = None, 0, []
    for line in text.splitlines():
        m = MARKER.match(line)
        if m:
            if name is not None:
                sections[name] = Section(rc, "\n".join(lines))
            name, rc, lines = m["name"], int(m["rc"]), []
        elif name is not None:
            lines.append(line)
    if name is not None:
        sections[name] = Section(rc, "\n".join(lines))
    return sections


def parse_os_release(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not sep or not key.strip() or key.startswith("#"):
            continue
        try:
            parts = shlex.split(value)
        except ValueError:
            parts = [value]
        out[key.strip()] = parts[0] if parts else ""
    return out


def parse_python(text: str) -> tuple[int, ...] | None:
    m = re.fullmatch(r"\s*(\d+)\.(\d+)\.(\d+)\s*", text)
    return tuple(int(g) for g in m.groups()) if m else None


def parse_gpus(text: str) -> tuple[list[Gpu] | None, str | None]:
    result = smi.parse_query_csv(text, GPU_FIELDS)
    if result.errors:
        return None, "; ".join(result.errors[:2])
    gpus = [
        Gpu(
            row.get("index", "?"),
            row.get("name", "").strip(),
            row.get("driver_version", "").strip(),
            smi.as_int(row.get("memory.total", "")),
        )
        for row in result.rows
    ]
    return gpus, None


def parse_links(text: str) -> dict[str, Link]:
    return {
        entry["ifname"]: Link(entry["ifname"], str(entry.get("operstate", "")), tuple(entry.get("flags", ())))
        for entry in json.loads(text)
        if isinstance(entry, dict) and "ifname" in entry
    }


def parse_lsblk(text: str) -> list[BlockDevice]:
    out: list[BlockDevice] = []

    def walk(entries: list, parent: str | None) -> None:
        for entry in entries:
            size = entry.get("size")
            path = entry.get("path") or f"/dev/{entry['name']}"
            out.append(
                BlockDevice(
                    entry["name"],
                    path,
                    entry.get("type") or "",
                    int(size) if isinstance(size, int | str) and str(size).isdigit() else None,
                    entry.get("fstype"),
                    entry.get("mountpoint"),
                    parent,
                )
            )
            walk(entry.get("children") or [], path)

    walk(json.loads(text).get("blockdevices") or [], None)
    return out


def parse_findmnt(text: str) -> list[Mount]:
    return [
        Mount(fs["target"], fs.get("source") or "", fs.get("fstype") or "")
        for fs in json.loads(text).get("filesystems") or []
    ]


def parse_key_values(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def parse_df_free_kib(text: str) -> int | None:
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) < 2 or not lines[0].startswith("Filesystem"):
        return None
    fields = lines[-1].split()
    return int(fields[3]) if len(fields) >= 6 and fields[3].isdigit() else None


def parse_rdma_ports(text: str) -> tuple[list[Port], list[str]]:
    """The probe's ``rdma`` section: ``<device> <port> <file> <text>`` lines, grouped into ports."""
    files: dict[tuple[str, int], dict[str, str]] = {}
    for line in text.splitlines():
        parts = line.split(" ", 3)
        if len(parts) != 4 or not parts[1].isdigit() or parts[2] not in PORT_FILES:
            raise ValueError(f"not '<device> <port> <file> <text>': {line[:80]!r}")
        files.setdefault((parts[0], int(parts[1])), {})[parts[2]] = parts[3]
    ports: list[Port] = []
    errors: list[str] = []
    for (device, port), texts in sorted(files.items()):
        try:
            ports.append(parse_port(device, port, texts))
        except UnreadablePort as exc:
            errors.append(str(exc))
    return ports, errors


def parse(text: str) -> HostFacts:
    sections = split_sections(text)
    facts = HostFacts(sections=sections)

    def ok(name: str) -> Section | None:
        section = sections.get(name)
        return section if section is not None and section.ok else None

    def guarded(name: str, parser, attr: str) -> None:
        section = ok(name)
        if section is None:
            return
        try:
            setattr(facts, attr, parser(section.text))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            facts.unreadable[name] = f"{type(exc).__name__}: {exc}"

    guarded("os_release", parse_os_release, "os_release")
    if (s := ok("arch")) is not None:
        facts.arch = s.text.strip() or None
    if (s := ok("python")) is not None:
        facts.python = parse_python(s.text)
        if facts.python is None:
            facts.unreadable["python"] = f"not a version: {s.text.strip()[:80]!r}"
    if (s := ok("nvidia_smi")) is not None:
        facts.gpus, error = parse_gpus(s.text)
        if error:
            facts.unreadable["nvidia_smi"] = error
    guarded("ip_link", parse_links, "links")
    if (s := ok("rdma")) is not None:
        try:
            facts.rdma_ports, facts.rdma_errors = parse_rdma_ports(s.text)
        except ValueError as exc:
            facts.unreadable["rdma"] = str(exc)
    guarded("lsblk", parse_lsblk, "block_devices")
    guarded("findmnt", parse_findmnt, "mounts")
    if (s := sections.get("timesync")) is not None and s.rc in (0, 1):
        values = parse_key_values(s.text)
        facts.timesync = values or None
    if (s := ok("df")) is not None:
        facts.root_free_kib = parse_df_free_kib(s.text)
        if facts.root_free_kib is None:
            facts.unreadable["df"] = "no `df -P` table"
    if (s := ok("paths")) is not None:
        for line in s.text.splitlines():
            kind, _, path = line.partition(" ")
            if kind in ("dir", "other", "missing") and path:
                facts.paths[path] = kind
    if (s := ok("version")) is not None:
        facts.version = s.text.strip() or None
    if (s := ok("clock")) is not None:
        try:
            facts.clock = float(s.text.strip())
        except ValueError:
            facts.unreadable["clock"] = f"not a time: {s.text.strip()[:40]!r}"
    return facts
