"""Pure parsers for the output of the exact Slurm commands ``client`` runs: Debian 12's 22.05 and Debian 13's
24.11 (tests/slurm/captures holds real output of both).

No parser here raises on malformed input: each returns what it understood in
``items`` and every line (or hostlist fragment) it could not use in
``skipped``, so a caller can tell "no drained nodes" from "output we did not
understand" and fail closed on the latter.

Times: Slurm prints naive local times of the controller. ``client`` sets
``SLURM_TIME_FORMAT=standard`` so they are ISO 8601 (``2026-11-29T13:42:29``);
the parsers return naive ``datetime`` objects.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, NamedTuple, TypeVar

T = TypeVar("T")

# sinfo: one line per node and partition. The reason (%E) is free text and may
# itself contain "|", so it sits between fields that never do: the line is split
# twice from the left (name, state) and twice from the right (time, user).
SINFO_NODES_FORMAT = "%N|%t|%E|%H|%u"
SINFO_NODES_ARGS = ("sinfo", "--noheader", "--Node", "--format", SINFO_NODES_FORMAT)

# squeue: job ids and node lists never contain "|"; %R comes last because for a
# job that is not running it holds a free-text reason.
SQUEUE_RUNNING_FORMAT = "%i|%N|%R"
SQUEUE_RUNNING_ARGS = (
    "squeue",
    "--noheader",
    "--states=RUNNING,COMPLETING",
    "--format",
    SQUEUE_RUNNING_FORMAT,
)

RESERVATIONS_ARGS = ("scontrol", "show", "reservation", "--oneliner")
NO_RESERVATIONS = "No reservations in the system"

# A hostlist may name more nodes than any cluster has only by mistake (or by a
# hostile string); expanding "n[0-999999999]" would exhaust memory.
MAX_HOSTLIST_NAMES = 100_000
# int() refuses strings over 4300 digits; real node indices are short.
_MAX_INDEX_DIGITS = 18

# Compact-state suffixes (sinfo %t): * not responding, ~ powered off, # powering
# up, % powering down, ! power down pending, $ maintenance reservation,
# @ reboot requested, ^ reboot issued, - planned, + (reserved for future flags).
_STATE_SUFFIXES = "*~#%!$@^-+"
_DRAINED_IDLE = frozenset({"drain", "drained"})  # "drained" is the long (%T) spelling
_DRAINING = frozenset({"drng", "draining"})
_ABSENT = frozenset({"", "none", "(null)", "unknown", "n/a"})
_KEY_VALUE = re.compile(r"([A-Za-z][A-Za-z0-9_]*)=(.*)", re.DOTALL)
_INDEX = re.compile(r"[0-9]+")


@dataclass
class Parsed(Generic[T]):
    """Parser result: what was understood and what was not (raw lines or error notes)."""

    items: list[T] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.skipped


@dataclass(frozen=True)
class NodeState:
    name: str
    state: str  # raw sinfo %t, lower case, suffixes kept (e.g. "drain*", "mix-")
    reason: str | None
    reason_time: datetime | None
    reason_user: str | None

    @property
    def base_state(self) -> str:
        return self.state.rstrip(_STATE_SUFFIXES)

    @property
    def is_idle_drained(self) -> bool:
        """Drained with no jobs left: sinfo prints "drain" (also for DOWN+DRAIN)."""
        return self.base_state in _DRAINED_IDLE

    @property
    def is_draining(self) -> bool:
        """Drain requested while jobs still run (or complete): sinfo prints "drng"."""
        return self.base_state in _DRAINING

    @property
    def is_drained(self) -> bool:
        return self.is_idle_drained or self.is_draining

    @property
    def not_responding(self) -> bool:
        return "*" in self.state[len(self.base_state) :]


@dataclass(frozen=True)
class Reservation:
    name: str
    start_time: datetime | None
    end_time: datetime | None
    nodes: str  # hostlist expression as Slurm prints it; "" when none
    users: tuple[str, ...]
    flags: frozenset[str]
    state: str | None = None


class RunningJob(NamedTuple):
    job_id: str
    nodelist: str  # hostlist expression, e.g. "gpu-[1-2]"


def parse_time(text: str) -> datetime | None:
    """A Slurm timestamp, or None for "Unknown", "None", "(null)" or anything unparseable."""
    text = text.strip()
    if text.lower() in _ABSENT:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def _optional(text: str) -> str | None:
    text = text.strip()
    return None if text.lower() in _ABSENT else text


def parse_sinfo_nodes(text: str) -> Parsed[NodeState]:
    """Parse ``sinfo --noheader --Node --format "%N|%t|%E|%H|%u"``.

    sinfo prints a node once per partition; the first line for a name wins.
    """
    result: Parsed[NodeState] = Parsed()
    seen: set[str] = set()
    for line in text.splitlines():
        if not line.strip():
            continue
        left = line.split("|", 2)
        if len(left) != 3:
            result.skipped.append(line)
            continue
        name, state, rest = left[0].strip(), left[1].strip().lower(), left[2]
        right = rest.rsplit("|", 2)
        if len(right) != 3 or not name or not state or _has_space(name) or _has_space(state):
            result.skipped.append(line)
            continue
        if name == "NODELIST":  # a header: someone dropped --noheader
            result.skipped.append(line)
            continue
        reason, when, user = right
        if name in seen:
            continue
        seen.add(name)
        result.items.append(
            NodeState(
                name=name,
                state=state,
                reason=_optional(reason),
                reason_time=parse_time(when),
                reason_user=_optional(user),
            )
        )
    return result


def parse_squeue_running(text: str) -> Parsed[RunningJob]:
    """Parse ``squeue --noheader --states=RUNNING,COMPLETING --format "%i|%N|%R"``.

    A job whose nodes cannot be read is skipped, so callers know the busy set
    is incomplete.
    """
    result: Parsed[RunningJob] = Parsed()
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|", 2)
        if len(parts) != 3:
            result.skipped.append(line)
            continue
        job_id, nodes, reason = (p.strip() for p in parts)
        if not job_id or _has_space(job_id) or job_id == "JOBID":
            result.skipped.append(line)
            continue
        nodelist = _optional(nodes)
        if nodelist is None:
            # %R holds the node list for running jobs and "(Reason)" otherwise.
            fallback = _optional(reason)
            nodelist = fallback if fallback and not fallback.startswith("(") else None
        if nodelist is None or _has_space(nodelist):
            result.skipped.append(line)
            continue
        result.items.append(RunningJob(job_id, nodelist))
    return result


def _split_pairs(line: str) -> dict[str, str] | None:
    """``Key=Value Key=Value`` into a dict; a token without "=" continues the previous value."""
    pairs: dict[str, str] = {}
    key: str | None = None
    for token in line.split():
        match = _KEY_VALUE.fullmatch(token)
        if match:
            key = match.group(1)
            pairs[key] = match.group(2)
        elif key is None:
            return None
        else:
            pairs[key] = f"{pairs[key]} {token}"
    return pairs


def _split_list(value: str) -> list[str]:
    if value.strip().lower() in _ABSENT:
        return []
    return [v for v in (p.strip() for p in value.split(",")) if v]


def parse_reservations(text: str) -> Parsed[Reservation]:
    """Parse ``scontrol show reservation --oneliner`` (one reservation per line)."""
    result: Parsed[Reservation] = Parsed()
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped == NO_RESERVATIONS:
            continue
        pairs = _split_pairs(stripped)
        name = (pairs or {}).get("ReservationName", "").strip()
        if pairs is None or not name or name.lower() in _ABSENT:
            result.skipped.append(line)
            continue
        nodes = _optional(pairs.get("Nodes", "")) or ""
        result.items.append(
            Reservation(
                name=name,
                start_time=parse_time(pairs.get("StartTime", "")),
                end_time=parse_time(pairs.get("EndTime", "")),
                nodes=nodes,
                users=tuple(_split_list(pairs.get("Users", ""))),
                flags=frozenset(f.upper() for f in _split_list(pairs.get("Flags", ""))),
                state=_optional(pairs.get("State", "")),
            )
        )
    return result


def _has_space(text: str) -> bool:
    return any(c.isspace() for c in text)


def _split_top_level(
    text: str, opening: str = "[", closing: str = "]", max_depth: int = 1
) -> list[str] | None:
    """Split on commas outside brackets (hostlists: ``[...]``, one level; GRES: ``(...)``, any depth);
    None when they do not balance or nest deeper than ``max_depth``."""
    parts: list[str] = []
    depth = 0
    start = 0
    for i, char in enumerate(text):
        if char == opening:
            depth += 1
            if depth > max_depth:
                return None
        elif char == closing:
            depth -= 1
            if depth < 0:
                return None
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth != 0:
        return None
    parts.append(text[start:])
    return parts


def _expand_ranges(body: str) -> tuple[list[str] | None, str | None]:
    """The inside of one bracket, e.g. "01-03,7", into ["01","02","03","7"]."""
    values: list[str] = []
    for piece in body.split(","):
        piece = piece.strip()
        lo, sep, hi = piece.partition("-")
        if not _INDEX.fullmatch(lo) or (sep and not _INDEX.fullmatch(hi)):
            return None, f"bad range {piece!r}"
        if len(lo) > _MAX_INDEX_DIGITS or len(hi) > _MAX_INDEX_DIGITS:
            return None, f"range index too long {piece!r}"
        if not sep:
            values.append(lo)
            continue
        first, last = int(lo), int(hi)
        if last < first:
            return None, f"descending range {piece!r}"
        if len(values) + last - first + 1 > MAX_HOSTLIST_NAMES:
            return None, f"range {piece!r} expands past {MAX_HOSTLIST_NAMES} names"
        # Slurm pads to the width of the lower bound: node[08-10] -> node08..node10.
        width = len(lo)
        values.extend(str(i).zfill(width) for i in range(first, last + 1))
    return values, None


def _expand_item(item: str, budget: int) -> tuple[list[str], str | None]:
    """One top-level item ("gpu-[1-3]", "rack[1-2]-n[1-4]", "ctl") into names."""
    # Text and bracket bodies alternate: re.split keeps the captured bodies.
    chunks = re.split(r"\[([^\[\]]*)\]", item)
    if any("[" in c or "]" in c for c in chunks[0::2]):
        return [], f"unbalanced brackets in {item!r}"
    choices: list[list[str]] = []
    total = 1
    for i, chunk in enumerate(chunks):
        if i % 2 == 0:
            choices.append([chunk])
            continue
        values, error = _expand_ranges(chunk)
        if values is None:
            return [], f"{error} in {item!r}"
        choices.append(values)
        # Checked per bracket so "a[0-99999]b[0-99999]..." stops before building the product.
        total *= len(values)
        if total > budget:
            return [], f"{item!r} expands past {MAX_HOSTLIST_NAMES} names"
    if total > budget:  # a plain name once the budget is spent
        return [], f"{item!r} dropped: hostlist names more than {MAX_HOSTLIST_NAMES} hosts"
    return ["".join(parts) for parts in itertools.product(*choices)], None


def parse_hostlist(text: str) -> Parsed[str]:
    """Expand a Slurm hostlist; ``skipped`` holds one note per item that could not be expanded.

    Supports "gpu-[1-3,5],ctl", zero padding ("node[01-03]") and several
    bracket groups in one name ("r[1-2]n[1-2]"). Never more than
    ``MAX_HOSTLIST_NAMES`` names in total.
    """
    result: Parsed[str] = Parsed()
    text = text.strip()
    if not text or text.lower() in _ABSENT:
        return result
    items = _split_top_level(text)
    if items is None:
        result.skipped.append(f"unbalanced brackets in {text!r}")
        return result
    for item in items:
        item = item.strip()
        if not item:
            continue
        names, error = _expand_item(item, MAX_HOSTLIST_NAMES - len(result.items))
        if error:
            result.skipped.append(error)
        else:
            result.items.extend(names)
    return result


def expand_hostlist(text: str) -> list[str]:
    """The names a hostlist expression denotes; items that cannot be expanded are dropped.

    Use ``parse_hostlist`` when a partial answer must not be mistaken for a full one.
    """
    return parse_hostlist(text).items


# GPUs: per-node GRES and per-job allocations ---------------------------------
#
# Both come from the JSON Slurm prints with --json (22.05: the openapi/v0.0.38 dump; 23.02 and later: a
# data_parser plugin; both in Debian's slurm-wlm-basic-plugins, which slurm-client depends on). JSON, not
# text: a job's name, command, paths and comment are free text that may hold spaces, "=" and "|", and
# could forge the "Nodes=... GRES=..." fragments of `scontrol -d show job`. The commands ignore their
# other options with --json (squeue lists every job it keeps, of every state).
#
# Nodes: 22.05's `sinfo --json` prints {"nodes": [...]}, one entry per node. From 23.02 it prints
# {"sinfo": [...]}, records that each group several nodes (by partition, state and GRES use: not by
# configured GRES, and with no per-node TRES), so it can no longer tell each node's GPUs; the same
# release gave `scontrol show nodes --json` (22.05's scontrol has no --json), which prints the per-node
# {"nodes": [...]} list in the shape this module reads. ``client`` asks sinfo and turns to scontrol once
# sinfo answers grouped (``sinfo_json_grouped``).
#
# When slurmctld cannot be reached, 22.05 prints {"errors": [...], "nodes": []} and exits 0:
# ``json_errors`` finds those errors so the client can fail instead of reading "no jobs"; 24.11 prints
# nothing and exits 1.
SINFO_JSON_ARGS = ("sinfo", "--json")
NODES_JSON_ARGS = ("scontrol", "show", "nodes", "--json")
SQUEUE_JSON_ARGS = ("squeue", "--json")
GPU = "gpu"

# A job in one of these states holds nothing: slurmctld released its GRES when it began to complete
# (node_scheduler.c deallocate_nodes -> select_g_job_fini). Any other state (RUNNING, SUSPENDED,
# CONFIGURING, COMPLETING, REQUEUED, RESIZING, SIGNALING, STAGE_OUT, a new one) counts as holding
# its GPUs: counting too much can only hide a stale allocation, never invent one.
JOB_STATES_HOLDING_NOTHING = frozenset(
    {
        "PENDING",
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
    }
)
_GRES_COUNT = re.compile(r"([0-9]{1,18})([KMGTP]?)")
_GRES_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}
_IDX_RANGE = re.compile(r"([0-9]{1,6})(?:-([0-9]{1,6}))?")
# A node's GPU indices come from a bitmap of its GPUs; no node has this many.
_MAX_GPU_INDEX = 4096


@dataclass(frozen=True)
class GresItem:
    """One entry of a GRES string such as ``gpu:h100:3(IDX:0-2)``."""

    name: str  # "gpu"
    type: str | None  # "h100"; None when untyped ("gpu:2")
    count: int
    # From "(IDX:...)": the GPU indices allocated; empty for "(IDX:N/A)"; None when not printed.
    indices: frozenset[int] | None = None


@dataclass(frozen=True)
class NodeGres:
    """A node's GPUs as slurmctld counts them (``sinfo --json`` of 22.05, ``scontrol show nodes --json``)."""

    name: str
    state: str  # base state, lower case: "idle", "mixed", "allocated", "down", ...
    flags: frozenset[str]  # upper case: "DRAIN", "NOT_RESPONDING", "COMPLETING", ...
    gpus: int  # configured (Gres)
    # GresUsed: the allocation bitmap's view; None when the node reports no GRES.
    gpus_used: int | None
    used_indices: frozenset[int] | None  # None when GresUsed printed no IDX (before slurmd registers)
    # AllocTRES gres/gpu: the allocation counter's view; None when gres/gpu is not a tracked TRES
    # (AccountingStorageTRES), so AllocTRES cannot show it.
    gpus_alloc_tres: int | None

    @property
    def gpus_allocated(self) -> int:
        """The larger of the two views: the scheduler refuses a GPU either one counts as taken."""
        return max((v for v in (self.gpus_used, self.gpus_alloc_tres) if v is not None), default=0)

    @property
    def is_idle(self) -> bool:
        return self.state == "idle"


@dataclass(frozen=True)
class JobGpus:
    """The GPUs one job holds on one of its nodes (``squeue --json``)."""

    job_id: str
    state: str  # as Slurm prints it: "RUNNING", "SUSPENDED", "COMPLETING", ...
    node: str
    # 0 for a job without GPUs (or one completing: its GRES are already released); None when the job
    # asks for GPUs but Slurm printed no per-node GRES, so what it holds on this node is unknown.
    gpus: int | None
    indices: frozenset[int] | None  # None when Slurm printed no IDX for this node
    # What the phantom check reads (sweep/allocations.phantom_candidates); not part of what a job holds,
    # so left out of equality.
    batch: bool = field(default=False, compare=False)  # sbatch: its script runs as step <job>.batch
    start_time: datetime | None = field(default=None, compare=False)


def _epoch(value: Any) -> datetime | None:
    """squeue --json times: epoch seconds (22.05), or {"set": true, "number": N} (23.02 and later)."""
    if isinstance(value, dict):
        value = value.get("number") if value.get("set", True) else None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    return datetime.fromtimestamp(value)


SSTAT_BATCH_ARGS = ("sstat", "--noheader", "--parsable2", "--format", "JobID", "--jobs")


def parse_sstat_job_ids(text: str) -> set[str]:
    """Job ids whose steps ``sstat --format JobID`` listed (``9.batch`` -> ``9``)."""
    return {line.strip().split(".", 1)[0] for line in text.splitlines() if line.strip()}


def _parse_indices(text: str) -> frozenset[int] | None:
    """ "0-2,5" -> {0, 1, 2, 5}; "N/A" -> {}; None when unreadable."""
    text = text.strip()
    if text.upper() == "N/A":
        return frozenset()
    indices: set[int] = set()
    for piece in text.split(","):
        match = _IDX_RANGE.fullmatch(piece.strip())
        if not match:
            return None
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        if last < first or last >= _MAX_GPU_INDEX:
            return None
        indices.update(range(first, last + 1))
    return frozenset(indices)


def _parse_gres_item(item: str) -> GresItem | None:
    item = item.strip()
    head, paren, tail = item.partition("(")
    indices: frozenset[int] | None = None
    if paren:
        if not tail.endswith(")"):
            return None
        inside = tail[:-1]
        # Other parentheses: socket affinity "(S:0-1)" in Gres, shared-GRES use "(0/100,0/100)".
        if inside.startswith("IDX:"):
            indices = _parse_indices(inside[len("IDX:") :])
            if indices is None:
                return None
    parts = head.split(":")
    if not parts[0] or any(_has_space(p) or not p for p in parts):
        return None
    count = 1
    match = _GRES_COUNT.fullmatch(parts[-1]) if len(parts) > 1 else None
    if match:
        count = int(match.group(1)) * _GRES_UNITS[match.group(2)]
        parts = parts[:-1]
    if len(parts) > 2:
        return None
    return GresItem(parts[0], parts[1] if len(parts) == 2 else None, count, indices)


def parse_gres(text: str | None) -> list[GresItem] | None:
    """A GRES string (Gres, GresUsed, a job's per-node GRES) into items; None when any is unreadable.

    "gpu:h100:3(IDX:0-2)", "gpu:h100:4(S:0-1)", "gpu:2", "gpu", "gpu:a:1(IDX:0),gpu:b:1(IDX:1)";
    "", "(null)" and "N/A" are no GRES at all.
    """
    if text is None:
        return []
    if not isinstance(text, str):
        return None
    if text.strip().lower() in _ABSENT:
        return []
    parts = _split_top_level(text.strip(), "(", ")", max_depth=len(text))
    if parts is None:
        return None
    items = [_parse_gres_item(p) for p in parts]
    if any(i is None for i in items):
        return None
    return [i for i in items if i is not None]


def gpu_count(items: list[GresItem]) -> int:
    return sum(i.count for i in items if i.name == GPU)


def gpu_indices(items: list[GresItem]) -> frozenset[int] | None:
    """The union of the GPU items' indices; None when one of them printed none."""
    gpus = [i for i in items if i.name == GPU]
    if any(i.indices is None for i in gpus):
        return None
    return frozenset().union(*(i.indices or frozenset() for i in gpus))


def tres_gpus(text: str | None) -> int | None:
    """GPUs in a TRES string ("cpu=2,mem=1G,gres/gpu=4,gres/gpu:a100=4"); None when gres/gpu is absent.

    The untyped ``gres/gpu`` is the total; only typed ones (``gres/gpu:a100``) are summed.
    """
    if not text or not isinstance(text, str):
        return None
    untyped: int | None = None
    typed = 0
    seen_typed = False
    for pair in text.split(","):
        key, sep, value = pair.strip().partition("=")
        if not sep or not value.isdigit():
            continue
        if key == f"gres/{GPU}":
            untyped = int(value)
        elif key.startswith(f"gres/{GPU}:"):
            typed += int(value)
            seen_typed = True
    if untyped is not None:
        return untyped
    return typed if seen_typed else None


def json_errors(text: str) -> list[str]:
    """The ``errors`` a Slurm --json answer carries (one line each); [] for none or unreadable JSON."""
    try:
        data = json.loads(text)
    except ValueError:
        return []
    errors = data.get("errors") if isinstance(data, dict) else None
    if not isinstance(errors, list):
        return []
    lines = []
    for error in errors:
        if isinstance(error, dict):
            parts = [str(error[k]) for k in ("source", "description", "error") if error.get(k)]
            lines.append(": ".join(parts) or json.dumps(error, sort_keys=True))
        else:
            lines.append(str(error))
    return lines


# What a node reader says of a grouped ``sinfo --json`` answer: one line, the thing and the fix.
SINFO_GROUPED = (
    'sinfo --json printed records that group nodes ({"sinfo": [...]}, Slurm 23.02 and later), which cannot '
    "tell each node's GPUs: read `scontrol show nodes --json` instead (SlurmClient.node_gres does)"
)


def sinfo_json_grouped(text: str) -> bool:
    """Whether ``text`` is the ``{"sinfo": [...]}`` answer of ``sinfo --json`` since 23.02 (no node list)."""
    try:
        data = json.loads(text)
    except ValueError:
        return False
    return isinstance(data, dict) and isinstance(data.get("sinfo"), list) and "nodes" not in data


def _json_list(text: str, key: str, result: Parsed[Any]) -> list[Any] | None:
    try:
        data = json.loads(text)
    except ValueError as exc:
        result.skipped.append(f"not JSON: {exc}")
        return None
    if key == "nodes" and sinfo_json_grouped(text):
        result.skipped.append(SINFO_GROUPED)
        return None
    if not isinstance(data, dict) or not isinstance(data.get(key), list):
        result.skipped.append(f"no {key!r} list in the answer")
        return None
    result.skipped.extend(f"Slurm reported: {e}" for e in json_errors(text))
    return list(data[key])


def _node_state(entry: dict[str, Any]) -> tuple[str, frozenset[str]] | None:
    """22.05 prints "state": "mixed" and "state_flags": ["DRAIN"]; 23.02+ prints ["MIXED", "DRAIN"]."""
    state = entry.get("state")
    flags = entry.get("state_flags") or []
    if isinstance(state, list) and state and all(isinstance(s, str) for s in state):
        state, flags = state[0], [*state[1:], *flags]
    if not isinstance(state, str) or not state or not isinstance(flags, list):
        return None
    return state.lower(), frozenset(str(f).upper() for f in flags)


def parse_nodes_gres_json(text: str) -> Parsed[NodeGres]:
    """Parse a per-node ``{"nodes": [...]}`` list: ``scontrol show nodes --json`` (23.02 and later) or 22.05's
    ``sinfo --json``, one entry per node, each node once.

    The grouped ``{"sinfo": [...]}`` answer of a newer sinfo holds no such list: it gives no items and one
    note (``SINFO_GROUPED``) naming the command to read instead.
    """
    result: Parsed[NodeGres] = Parsed()
    entries = _json_list(text, "nodes", result)
    for entry in entries or []:
        name = entry.get("name") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name or _has_space(name):
            result.skipped.append(f"node entry without a name: {repr(entry)[:200]}")
            continue
        state = _node_state(entry)
        configured = parse_gres(entry.get("gres"))
        used_text = entry.get("gres_used")
        used = parse_gres(used_text)
        tres = {k: entry.get(k) for k in ("tres", "tres_used")}
        if (
            state is None
            or configured is None
            or used is None
            or any(v is not None and not isinstance(v, str) for v in tres.values())
        ):
            result.skipped.append(
                f"node {name}: unreadable state, GRES or TRES "
                f"(state={entry.get('state')!r}, gres={entry.get('gres')!r}, gres_used={used_text!r}, "
                f"tres={tres['tres']!r}, tres_used={tres['tres_used']!r})"
            )
            continue
        tracked = tres_gpus(entry.get("tres")) is not None
        alloc_tres = tres_gpus(entry.get("tres_used"))
        result.items.append(
            NodeGres(
                name=name,
                state=state[0],
                flags=state[1],
                gpus=gpu_count(configured),
                gpus_used=gpu_count(used) if any(i.name == GPU for i in used) else None,
                used_indices=gpu_indices(used) if any(i.name == GPU for i in used) else None,
                gpus_alloc_tres=(alloc_tres or 0) if tracked else alloc_tres,
            )
        )
    return result


# The name it had when 22.05's sinfo was the only reader.
parse_sinfo_gres_json = parse_nodes_gres_json


def _job_state(entry: dict[str, Any]) -> str | None:
    """22.05 prints "job_state": "RUNNING"; 23.11+ prints a list such as ["RUNNING"]."""
    state = entry.get("job_state")
    if isinstance(state, list) and state and all(isinstance(s, str) for s in state):
        return "+".join(s.upper() for s in state)
    return state.upper() if isinstance(state, str) and state else None


def job_holds_resources(state: str) -> bool:
    """Whether a job in ``state`` ("RUNNING", "COMPLETED+COMPLETING"...) may still hold its GPUs."""
    parts = set(state.upper().split("+"))
    return not parts <= JOB_STATES_HOLDING_NOTHING


def _wants_gpus(entry: dict[str, Any]) -> bool:
    asked = " ".join(
        str(entry.get(k) or "")
        for k in ("tres_per_node", "tres_per_job", "tres_per_socket", "tres_per_task", "tres_alloc_str")
    )
    return GPU in asked


def _job_nodes(entry: dict[str, Any]) -> list[str] | None:
    """The job's nodes in Slurm's order (the order of its per-node GRES list); None when unreadable.

    The per-node allocation list gives that order: ``job_resources.allocated_nodes[].nodename`` up to 23.11,
    ``job_resources.nodes.allocation[].name`` from 24.05 (data_parser v0.0.41; the 24.11 captures). Both walk
    the job's node list (``hostlist_nth``), as ``scontrol -d show job`` does when it pairs nodes with GRES.
    Without one (a job whose resources Slurm did not detail), the hostlist: ``job_resources.nodes`` (a
    string before 24.05, ``.nodes.list`` after) or the job's ``nodes``. An allocation list with an entry
    that names no node is unreadable, not skipped over: the job would seem to hold less than it does.
    """
    resources = entry.get("job_resources")
    nodes = entry.get("nodes")
    if isinstance(resources, dict):
        res_nodes = resources.get("nodes")
        if isinstance(res_nodes, dict):
            allocated, name_key = res_nodes.get("allocation"), "name"
            res_nodes = res_nodes.get("list")
        else:
            allocated, name_key = resources.get("allocated_nodes"), "nodename"
        if allocated is not None and not isinstance(allocated, list):
            return None
        if allocated:
            names = [n.get(name_key) if isinstance(n, dict) else None for n in allocated]
            if not all(isinstance(n, str) and n and not _has_space(n) for n in names):
                return None
            return [str(n) for n in names]
        if isinstance(res_nodes, str) and res_nodes:
            nodes = res_nodes
    if nodes is None or nodes == "":
        return []
    if not isinstance(nodes, str):
        return None
    expanded = parse_hostlist(nodes)
    return None if expanded.skipped else expanded.items


def parse_squeue_gpus_json(text: str) -> Parsed[JobGpus]:
    """Parse ``squeue --json`` into the GPUs each job that may hold resources has on each node.

    A job whose nodes cannot be told is a note in ``skipped``, so callers know the list is
    incomplete and must not conclude any node's GPUs are unheld; a job whose nodes are known but
    whose GPUs on them are not gives entries with ``gpus=None``.
    """
    result: Parsed[JobGpus] = Parsed()
    entries = _json_list(text, "jobs", result)
    for entry in entries or []:
        if not isinstance(entry, dict):
            result.skipped.append(f"job entry is not an object: {repr(entry)[:200]}")
            continue
        job_id = entry.get("job_id")
        state = _job_state(entry)
        if isinstance(job_id, bool) or not isinstance(job_id, int | str) or not str(job_id).strip():
            result.skipped.append(f"job entry without a job_id: {repr(entry)[:200]}")
            continue
        job = str(job_id).strip()
        if state is None:
            result.skipped.append(f"job {job}: no job_state")
            continue
        if not job_holds_resources(state):
            continue
        details = entry.get("gres_detail") or []
        nodes = _job_nodes(entry)
        if nodes is None or not isinstance(details, list):
            result.skipped.append(
                f"job {job} ({state}): unreadable node list or gres_detail (job_resources="
                f"{repr(entry.get('job_resources'))[:200]}, nodes={entry.get('nodes')!r}, gres_detail="
                f"{repr(details)[:200]}); this job's GPUs are unknown, so no node's may be judged unheld"
            )
            continue
        if not nodes:
            if details:
                result.skipped.append(f"job {job} ({state}): GRES detail but no nodes")
            continue
        batch = entry.get("batch_flag") is True
        started = _epoch(entry.get("start_time"))
        if not details:
            # A completing job's GRES were released when it began to complete (its gres_detail is
            # then empty, tests/slurm/captures/squeue-completing.json); any other job that asks for
            # GPUs and shows none is unknown on its nodes, and the rule leaves those nodes alone.
            known = "COMPLETING" in state.split("+") or not _wants_gpus(entry)
            result.items.extend(
                JobGpus(
                    job, state, node, 0 if known else None, frozenset() if known else None, batch, started
                )
                for node in nodes
            )
            continue
        if len(details) != len(nodes):
            result.skipped.append(f"job {job} ({state}): {len(details)} GRES details for {len(nodes)} nodes")
            continue
        per_node = [parse_gres(d) if isinstance(d, str) else None for d in details]
        if any(items is None for items in per_node):
            result.skipped.append(f"job {job} ({state}): unreadable GRES detail {details!r}")
            continue
        for node, items in zip(nodes, per_node, strict=True):
            assert items is not None
            result.items.append(
                JobGpus(job, state, node, gpu_count(items), gpu_indices(items), batch, started)
            )
    return result
