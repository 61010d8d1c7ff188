"""NVIDIA's per-Xid recommended actions, as versioned data.

Source: NVIDIA's Xid catalog "Resolution Bucket (Immediate Action)"
(docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), as machine-read
on 2025-10-29 (see shared/reference/health-anchors.md §3.3). Tools disagree on
some entries (109, 63), so inventories may override any entry through
``megahour_health_xid_overrides``; tests pin this table.
"""

from __future__ import annotations

from enum import StrEnum

CATALOG_VERSION = "nvidia-xid-catalog-2025-10-29"


class XidAction(StrEnum):
    IGNORE = "IGNORE"
    RESTART_APP = "RESTART_APP"
    RESET_GPU = "RESET_GPU"
    RESTART_BM = "RESTART_BM"
    WORKFLOW = "WORKFLOW"  # catalog says "follow the Xid's workflow": a person must look
    INFORMATIONAL = "INFORMATIONAL"  # 154: read the recovery action instead


CATALOG: dict[int, XidAction] = {
    13: XidAction.RESTART_APP,
    31: XidAction.RESTART_APP,
    43: XidAction.IGNORE,
    45: XidAction.WORKFLOW,
    48: XidAction.WORKFLOW,
    62: XidAction.RESET_GPU,
    63: XidAction.IGNORE,
    64: XidAction.RESET_GPU,
    68: XidAction.RESTART_APP,
    74: XidAction.WORKFLOW,
    79: XidAction.RESTART_BM,
    92: XidAction.IGNORE,
    94: XidAction.RESTART_APP,
    95: XidAction.RESET_GPU,
    109: XidAction.RESET_GPU,
    119: XidAction.RESET_GPU,
    120: XidAction.RESET_GPU,
    140: XidAction.RESET_GPU,
    154: XidAction.INFORMATIONAL,
}


def action_for(xid: int, overrides: dict[int, str] | None = None) -> XidAction | None:
    """The action for ``xid``; an override wins; None when the catalog does not list it."""
    if overrides and xid in overrides:
        return XidAction(overrides[xid])
    return CATALOG.get(xid)
