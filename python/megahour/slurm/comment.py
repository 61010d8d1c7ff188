"""The health stamp a node carries in its Slurm ``Comment`` field.

The HealthCheckProgram runs on the node; the sweeper runs on the controller and
must not resume a node on stale news. So each health check writes its verdict
into the node's Comment (``megahour-health:PASS:ok:1795962161``), and the sweeper
reads it back with one ``scontrol show node``. No spaces, so the value survives
``--oneliner`` output.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

PREFIX = "megahour-health"
_STAMP = re.compile(rf"^{PREFIX}:(?P<status>PASS|WARN|FAIL|UNKNOWN):(?P<reason>[a-z0-9_]+):(?P<at>\d+)$")
_NODE = re.compile(r"(?:^|\s)NodeName=(?P<name>\S+)")
_COMMENT = re.compile(r"(?:^|\s)Comment=(?P<comment>\S+)")


@dataclass(frozen=True)
class HealthStamp:
    status: str
    reason: str
    at: datetime  # UTC

    def render(self) -> str:
        return f"{PREFIX}:{self.status}:{self.reason}:{int(self.at.timestamp())}"


def parse_stamp(comment: str | None) -> HealthStamp | None:
    match = _STAMP.match(comment or "")
    if not match:
        return None
    return HealthStamp(match["status"], match["reason"], datetime.fromtimestamp(int(match["at"]), tz=UTC))


def stamps_from_show_node(text: str) -> dict[str, HealthStamp]:
    """Health stamps per node from ``scontrol show node --oneliner``; nodes without one are absent."""
    stamps = {}
    for line in text.splitlines():
        node, comment = _NODE.search(line), _COMMENT.search(line)
        stamp = parse_stamp(comment["comment"]) if comment else None
        if node and stamp:
            stamps[node["name"]] = stamp
    return stamps
