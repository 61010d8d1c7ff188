"""The verdict contract every check returns."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


class Status(StrEnum):
    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"
    UNKNOWN = "UNKNOWN"


# Gate order: a FAIL outranks an UNKNOWN, which outranks a WARN.
_SEVERITY = {Status.PASS: 0, Status.WARN: 1, Status.UNKNOWN: 2, Status.FAIL: 3}


@dataclass(frozen=True)
class Verdict:
    check: str
    status: Status
    reason: str  # stable reason code, e.g. "ecc_volatile_uncorrected"; "ok" when passing
    message: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = self.status.value
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Verdict:
        """The inverse of :meth:`to_dict`; a missing field or an unknown status raises ValueError."""
        try:
            return cls(
                check=str(data["check"]),
                status=Status(data["status"]),
                reason=str(data["reason"]),
                message=str(data.get("message") or ""),
                evidence=dict(data.get("evidence") or {}),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a verdict ({exc!r}): {data!r}") from None


def passed(check: str, message: str = "", **evidence: Any) -> Verdict:
    return Verdict(check, Status.PASS, "ok", message, evidence)


def worst(verdicts: list[Verdict]) -> Verdict | None:
    """The verdict that decides the gate: highest severity, first one on ties."""
    if not verdicts:
        return None
    return max(verdicts, key=lambda v: _SEVERITY[v.status])


def gate_passes(verdicts: list[Verdict]) -> bool:
    """Fail closed: only PASS and WARN let a job start. An empty set never passes."""
    return bool(verdicts) and all(v.status in (Status.PASS, Status.WARN) for v in verdicts)
