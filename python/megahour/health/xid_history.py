"""Remember which Xids each boot saw, so a fault that survives a reboot escalates.

Kept in the health state directory as ``xid-history.json``:
``{"<boot_id>": [["0000:0f:00", 94], ...], ...}``, bounded to the last few boots
and written atomically.
"""

from __future__ import annotations

import json
from pathlib import Path

from megahour.atomicio import atomic_write_text
from megahour.health.kernel_log import XidEvent

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
KEEP_BOOTS = 5


def current_boot_id(path: Path = BOOT_ID) -> str:
    try:
        return path.read_text().strip() or "unknown"
    except OSError:
        return "unknown"


def load(path: Path) -> dict[str, list[tuple[str, int]]]:
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}  # no history is not an error: nothing escalates
    history: dict[str, list[tuple[str, int]]] = {}
    if isinstance(raw, dict):
        for boot, pairs in raw.items():
            if isinstance(pairs, list):
                history[str(boot)] = [
                    (str(p[0]), int(p[1]))
                    for p in pairs
                    if isinstance(p, list) and len(p) == 2 and str(p[1]).isdigit()
                ]
    return history


def earlier_boots(history: dict[str, list[tuple[str, int]]], boot_id: str) -> set[tuple[str, int]]:
    return {pair for boot, pairs in history.items() if boot != boot_id for pair in pairs}


def record(
    path: Path, history: dict[str, list[tuple[str, int]]], boot_id: str, events: list[XidEvent]
) -> None:
    seen = sorted(set(history.get(boot_id, [])) | {(e.pci, e.xid) for e in events})
    if seen == sorted(history.get(boot_id, [])) and path.exists():
        return
    history = {b: p for b, p in history.items() if b != boot_id}
    # Insertion order is boot order; keep the newest few.
    kept = [*list(history.items())[-(KEEP_BOOTS - 1) :], (boot_id, seen)]
    atomic_write_text(path, json.dumps({b: [list(p) for p in pairs] for b, pairs in kept}, indent=1) + "\n")
