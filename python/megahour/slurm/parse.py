"""Pure parsers for the output of the exact Slurm 22.05 commands ``client`` runs.

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
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Generic, NamedTuple, TypeVar

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


def _split_top_level(text: str) -> list[str] | None:
    """Split on commas outside brackets; None when brackets do not balance."""
    parts: list[str] = []
    depth = 0
    start = 0
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
            if depth > 1:
                return None
        elif char == "]":
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
