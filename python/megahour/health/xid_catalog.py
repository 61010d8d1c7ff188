"""NVIDIA's per-Xid recommended actions, and what the health gate does with each.

The table itself is data (``xid_catalog_data``, every code of NVIDIA's published Xid
catalog with its "Resolution Bucket (Immediate Action)", its source and date);
``tests/health/test_xid_catalog.py`` fails when a published code is missing. Tools and
sites disagree on some entries (109, 63), so inventories may override any code through
``megahour_health_xid_overrides`` (slurm_node's ``xid_overrides``).
"""

from __future__ import annotations

from enum import StrEnum

from megahour.health import xid_catalog_data


class XidAction(StrEnum):
    """NVIDIA's resolution buckets, as the gate names them."""

    IGNORE = "IGNORE"
    RESTART_APP = "RESTART_APP"
    RESET_GPU = "RESET_GPU"
    RESTART_BM = "RESTART_BM"  # restart the node
    RESTART_VM = "RESTART_VM"
    CONTACT_SUPPORT = "CONTACT_SUPPORT"
    CHECK_MECHANICALS = "CHECK_MECHANICALS"
    UPDATE_FW = "UPDATE_FW"
    WORKFLOW = "WORKFLOW"  # "follow the Xid's workflow": a person must look
    WORKFLOW_XID_48 = "WORKFLOW_XID_48"  # double-bit ECC
    WORKFLOW_NVLINK = "WORKFLOW_NVLINK"
    # Xid 45, "preemptive cleanup": the driver tearing a channel down after a job ended or
    # after another Xid. Thousands a node are routine; the Xid that caused it is judged by its own entry.
    CHANNEL_TEARDOWN = "WORKFLOW_XID_45"
    INFORMATIONAL = "XID_154"  # 154: the recovery-action check reads it instead
    UNKNOWN = "UNKNOWN"  # listed with no resolution


# Older inventories spelled two of them differently; overrides keep working.
_ALIASES = {"XID_154": XidAction.INFORMATIONAL, "INFORMATIONAL": XidAction.INFORMATIONAL}

CATALOG_VERSION = f"nvidia-xid-catalog-{xid_catalog_data.SOURCE_DATE}"
CATALOG: dict[int, XidAction] = {
    code: XidAction(bucket) for code, (_name, bucket, _text) in xid_catalog_data.ENTRIES.items()
}

# What each bucket does to the gate. A FAIL drains; a WARN is recorded and alerted on.
DRAINS = frozenset(
    {
        XidAction.RESET_GPU,
        XidAction.RESTART_BM,
        XidAction.RESTART_VM,
        XidAction.CONTACT_SUPPORT,
        XidAction.CHECK_MECHANICALS,
        XidAction.UPDATE_FW,
        XidAction.WORKFLOW,
        XidAction.WORKFLOW_XID_48,
        XidAction.WORKFLOW_NVLINK,
    }
)
# Never a verdict of their own: routine, or judged by another check.
SILENT = frozenset({XidAction.IGNORE, XidAction.CHANNEL_TEARDOWN, XidAction.INFORMATIONAL})
# Faults a user's program causes (NVIDIA's k8s-device-plugin skips these as application
# errors; the catalog's RESTART_APP bucket says the same): they recur whenever the program
# does, so recurring after a reboot says nothing about the hardware.
APPLICATION_XIDS = frozenset(getattr(xid_catalog_data, "APP_CAUSED", ())) | {13, 31, 43, 45, 68}


def action_for(xid: int, overrides: dict[int, str] | None = None) -> XidAction | None:
    """The action for ``xid``; an override wins; None when the catalog does not list it."""
    if overrides and xid in overrides:
        value = overrides[xid]
        return _ALIASES.get(value) or XidAction(value)
    return CATALOG.get(xid)


def escalates_on_recurrence(xid: int, action: XidAction | None) -> bool:
    """Whether the same Xid on the same GPU in an earlier boot makes this one a hardware fault.

    Only hardware classes escalate: an unlisted code (a newer driver's) might be hardware, an
    application's fault or a routine message is not.
    """
    if action is not None and (action in SILENT or action == XidAction.RESTART_APP):
        return False
    return xid not in APPLICATION_XIDS


def valid_override(value: str) -> bool:
    return value in _ALIASES or value in {action.value for action in XidAction}
