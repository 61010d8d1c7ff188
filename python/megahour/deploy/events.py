"""A deploy's progress and outcome from ansible-runner's event stream (pure: events in, lines and a
summary out; ``runner`` does the I/O).

ansible-runner hands every event to a callback as a dict: ``event`` (``playbook_on_play_start``,
``playbook_on_task_start``, ``runner_on_ok``, ``runner_on_failed``, ``runner_on_unreachable``,
``runner_on_skipped``, ``playbook_on_stats``, ...) and ``event_data`` (``play``, ``task``, ``host``,
``res``, ``ignore_errors``; the stats event's per-host counters). From them:

- a line when a play starts and one per task, so a long deploy shows where it is;
- a line at once for each host that fails or cannot be reached (the first one is what the deploy's
  error names);
- each play's per-host counts when it ends;
- the recap: the per-host counters of ``playbook_on_stats``, the same ones ``ansible-playbook`` prints.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

COUNTERS = ("ok", "changed", "failed", "unreachable", "skipped", "rescued", "ignored")
# playbook_on_stats' names for them.
_STATS_KEYS = {
    "ok": "ok",
    "changed": "changed",
    "failed": "failures",
    "unreachable": "dark",
    "skipped": "skipped",
    "rescued": "rescued",
    "ignored": "ignored",
}


@dataclass(frozen=True)
class Failure:
    """A task that failed on a host (not ignored), or a host that could not be reached."""

    play: str
    task: str
    host: str
    message: str
    unreachable: bool

    def describe(self) -> str:
        what = "could not reach" if self.unreachable else "failed on"
        return f"task '{self.task}' {what} {self.host} (play '{self.play}'): {self.message}"


@dataclass
class PlayTally:
    name: str
    pattern: str
    hosts: dict[str, dict[str, int]] = field(default_factory=dict)

    def count(self, host: str, counter: str) -> None:
        counts = self.hosts.setdefault(host, dict.fromkeys(COUNTERS, 0))
        counts[counter] += 1


def _message(res: object) -> str:
    """A failed result's reason in one line: msg, then stderr's last line, then the rc."""
    if not isinstance(res, Mapping):
        return "no result"
    parts = []
    msg = str(res.get("msg") or "").strip()
    if msg:
        parts.append(msg.splitlines()[0] if "\n" in msg else msg)
    stderr = str(res.get("stderr") or "").strip()
    if stderr:
        parts.append(stderr.splitlines()[-1])
    if res.get("rc") not in (None, 0) and not any("rc" in p for p in parts):
        parts.append(f"rc {res['rc']}")
    text = "; ".join(parts) or "failed without a message"
    return text if len(text) <= 300 else text[:297] + "..."


def format_counts(counts: Mapping[str, int]) -> str:
    shown = [f"{name}={counts[name]}" for name in COUNTERS if counts.get(name)]
    return " ".join(shown) or "nothing ran"


@dataclass
class DeployTally:
    """Feed it every event (``feed``); it returns the progress lines to print for each."""

    plays: list[PlayTally] = field(default_factory=list)
    tasks: int = 0
    failures: list[Failure] = field(default_factory=list)
    recap: dict[str, dict[str, int]] = field(default_factory=dict)
    show_tasks: bool = True

    @property
    def first_failure(self) -> Failure | None:
        return self.failures[0] if self.failures else None

    def feed(self, event: Mapping) -> list[str]:
        kind = str(event.get("event", ""))
        data = event.get("event_data") or {}
        if kind == "playbook_on_play_start":
            lines = self._end_play()
            play = self._adopt(data)
            pattern = f" ({play.pattern})" if play.pattern else ""
            return [*lines, f"play {len(self.plays)}: {play.name}{pattern}"]
        if kind == "playbook_on_task_start":
            self.tasks += 1
            return [f"  task: {data.get('task', '')}"] if self.show_tasks else []
        if kind == "playbook_on_stats":
            lines = self._end_play()
            self.recap = {
                host: {name: int((data.get(key) or {}).get(host, 0)) for name, key in _STATS_KEYS.items()}
                for host in sorted(self._stats_hosts(data))
            }
            return lines
        host = data.get("host")
        if not host or not kind.startswith("runner_on_") or kind == "runner_on_start":
            return []  # runner_item_on_* repeat what the task's own runner_on_* event reports
        play = self.plays[-1] if self.plays else self._adopt(data)
        res = data.get("res") or {}
        # Counted as ansible-playbook's recap counts: a changed result is ok too, and so is an ignored
        # failure (tests/deploy/test_events.py checks the sums against playbook_on_stats).
        if kind == "runner_on_ok":
            play.count(host, "ok")
            if isinstance(res, Mapping) and res.get("changed"):
                play.count(host, "changed")
        elif kind == "runner_on_skipped":
            play.count(host, "skipped")
        elif kind == "runner_on_failed" and data.get("ignore_errors"):
            play.count(host, "ok")
            play.count(host, "ignored")
        elif kind in ("runner_on_failed", "runner_on_unreachable"):
            unreachable = kind == "runner_on_unreachable"
            play.count(host, "unreachable" if unreachable else "failed")
            failure = Failure(play.name, str(data.get("task", "")), str(host), _message(res), unreachable)
            self.failures.append(failure)
            return [f"  ✗ {failure.host}: {failure.describe()}"]
        return []

    def _adopt(self, data: Mapping) -> PlayTally:
        self.plays.append(PlayTally(str(data.get("play", "")), str(data.get("play_pattern", ""))))
        return self.plays[-1]

    def _end_play(self) -> list[str]:
        if not self.plays or not self.plays[-1].hosts:
            return []
        play = self.plays[-1]
        per_host = " | ".join(f"{host} {format_counts(c)}" for host, c in sorted(play.hosts.items()))
        return [f"  done: {per_host}"]

    @staticmethod
    def _stats_hosts(data: Mapping) -> set[str]:
        hosts: set[str] = set()
        for key in (*_STATS_KEYS.values(), "processed"):
            hosts.update((data.get(key) or {}).keys())
        return hosts

    def recap_lines(self) -> list[str]:
        if not self.recap:
            return []
        width = max(len(h) for h in self.recap)
        return [
            f"  {host:<{width}}  " + " ".join(f"{name}={counts[name]}" for name in COUNTERS)
            for host, counts in self.recap.items()
        ]

    def summary(self) -> dict:
        """The machine-readable outcome (``megahour deploy --json``); stable keys."""
        first = self.first_failure
        return {
            "plays": [{"name": p.name, "pattern": p.pattern, "hosts": p.hosts} for p in self.plays],
            "tasks": self.tasks,
            "hosts": self.recap,
            "first_failure": asdict(first) if first else None,
            "failures": [asdict(f) for f in self.failures],
        }
