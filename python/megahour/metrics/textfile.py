"""Render Prometheus exposition text and write it where node_exporter's textfile collector reads.

The collector may read at any moment, so files are written to a temporary name
in the same directory and renamed: it sees the old file or the new one, never half.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from megahour.atomicio import atomic_write_text

TEXTFILE_MODE = 0o644  # node_exporter reads the files as its own user


@dataclass(frozen=True)
class Sample:
    labels: dict[str, str]
    value: float


@dataclass
class Family:
    name: str
    help: str
    type: str = "gauge"
    samples: list[Sample] = field(default_factory=list)

    def add(self, value: float, **labels: str) -> Family:
        self.samples.append(Sample(labels, value))
        return self


def escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def render(families: list[Family]) -> str:
    lines: list[str] = []
    for family in families:
        lines.append(f"# HELP {family.name} {family.help}")
        lines.append(f"# TYPE {family.name} {family.type}")
        for sample in family.samples:
            labels = ",".join(f'{k}="{escape(str(v))}"' for k, v in sorted(sample.labels.items()))
            lines.append(
                f"{family.name}{{{labels}}} {_number(sample.value)}"
                if labels
                else f"{family.name} {_number(sample.value)}"
            )
    return "\n".join(lines) + "\n"


def write(directory: str | Path, name: str, families: list[Family], extra: str = "") -> Path:
    """Write ``<directory>/<name>.prom`` atomically and return its path; ``extra`` is exposition text
    rendered elsewhere (relayed from another exporter), appended as it is."""
    path = Path(directory) / f"{name}.prom"
    atomic_write_text(path, render(families) + extra, TEXTFILE_MODE)
    return path


def run_status(collector: str, ok: bool, ok_help: str, now: float) -> list[Family]:
    """A collector's ``megahour_<collector>_exporter_ok`` and ``..._last_run_timestamp_seconds``: the pair
    every collector writes first, which its ``Megahour*CollectorFailing`` alert reads."""
    return [
        Family(f"megahour_{collector}_exporter_ok", ok_help).add(1 if ok else 0),
        Family(
            f"megahour_{collector}_exporter_last_run_timestamp_seconds",
            "Unix time of the collector's last run.",
        ).add(now),
    ]
