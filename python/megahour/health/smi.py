"""Parse nvidia-smi CSV output (``--query-gpu``, ``--query-remapped-rows``, ...).

Real output has units in the header (``memory.total [MiB]``), cells such as
``N/A``, ``[N/A]``, ``[Not Supported]``, ``[Unknown Error]``, ``[GPU requires reset]``,
and ``Yes``/``No`` or ``Enabled``/``Disabled``. The header prints canonical names,
not the aliases asked for, so columns are mapped by position to the fields the
caller requested. Parsers never raise: bad lines are collected as errors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

UNAVAILABLE = {
    "n/a",
    "[n/a]",
    "[not supported]",
    "not supported",
    "[unknown error]",
    "[gpu requires reset]",
    "[insufficient permissions]",
    "",
}
_NUMBER = re.compile(r"^-?\d+(\.\d+)?$")
_UNIT_SUFFIX = re.compile(r"^(-?\d+(?:\.\d+)?)\s*(MiB|W|%|MHz|C)$")


@dataclass
class CsvResult:
    rows: list[dict[str, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def parse_query_csv(text: str, fields: list[str], *, header: bool = True) -> CsvResult:
    """Rows of ``--query-*`` output as {requested field: raw cell}, mapped by position."""
    result = CsvResult()
    lines = [line for line in text.splitlines() if line.strip()]
    if header:
        if not lines:
            result.errors.append("no output (expected a header line)")
            return result
        head = [c.strip() for c in lines[0].split(",")]
        if len(head) != len(fields):
            result.errors.append(
                f"header has {len(head)} columns, expected {len(fields)}: {lines[0][:200]!r}"
            )
            return result
        lines = lines[1:]
    for number, line in enumerate(lines, start=2 if header else 1):
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(fields):
            result.errors.append(f"line {number}: {len(cells)} cells, expected {len(fields)}: {line[:200]!r}")
            continue
        result.rows.append(dict(zip(fields, cells, strict=True)))
    return result


def is_unavailable(cell: str) -> bool:
    return cell.strip().lower() in UNAVAILABLE


def as_number(cell: str) -> float | None:
    """A numeric cell, with or without a unit suffix (``--format=csv`` vs ``nounits``)."""
    value = cell.strip()
    if is_unavailable(value):
        return None
    match = _UNIT_SUFFIX.match(value)
    if match:
        value = match.group(1)
    return float(value) if _NUMBER.match(value) else None


def as_int(cell: str) -> int | None:
    number = as_number(cell)
    return int(number) if number is not None and number == int(number) else None


def as_flag(cell: str) -> bool | None:
    """Yes/No, Enabled/Disabled, True/False; None when unavailable or unrecognised."""
    value = cell.strip().lower()
    if value in ("yes", "enabled", "true", "1"):
        return True
    if value in ("no", "disabled", "false", "0"):
        return False
    return None
