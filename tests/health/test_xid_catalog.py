"""The Xid catalog data: complete against NVIDIA's published catalog, and what the issue expects of it.

The yardstick is fixtures/nvidia-xid-catalog/codes.tsv, extracted by script from the published
catalog (see the SOURCES.md beside it); the module under test was generated from the same rows.
"""

import re
from pathlib import Path

import pytest

from megahour.health.xid_catalog import DRAINS, action_for
from megahour.health.xid_catalog_data import ENTRIES, SOURCE, SOURCE_DATE

CODES_TSV = Path(__file__).parent / "fixtures" / "nvidia-xid-catalog" / "codes.tsv"

# The catalog's "Resolution Bucket (Immediate Action)" spellings, and megahour's name for each.
SOURCE_TO_OURS = {
    "IGNORE": "IGNORE",
    "RESTART_APP": "RESTART_APP",
    "RESET_GPU": "RESET_GPU",
    "RESTART_BM": "RESTART_BM",
    "RESTART_VM": "RESTART_VM",
    "CONTACT_SUPPORT": "CONTACT_SUPPORT",
    "CHECK_MECHANICALS": "CHECK_MECHANICALS",
    "UPDATE_SWFW": "UPDATE_FW",
    "WORKFLOW_XID_45": "WORKFLOW_XID_45",
    "WORKFLOW_XID_48": "WORKFLOW_XID_48",
    "WORKFLOW_NVLINK_ERR": "WORKFLOW_NVLINK",
    "WORKFLOW_NVLINK5_ERR": "WORKFLOW_NVLINK",
    "XID_154": "XID_154",
    # Not one of megahour's buckets: "If UVM/vGPU is being utilized, RESET_GPU; otherwise IGNORE".
    "CHECK_UVM": "WORKFLOW",
    "": "UNKNOWN",  # the catalog lists the code with an empty Immediate Action cell
}
BUCKETS = frozenset(SOURCE_TO_OURS.values())

# The must-drain codes.
MUST_DRAIN = (46, 48, 62, 64, 79, 95, 110, 119, 120, 136, 140, 143, 144, 145, 146, 147, 148, 149, 150)
MUST_DRAIN += (155, 156, 158, 160, 162)
# Where the catalog (2025-10-29) disagrees with the issue. The data keeps the catalog's word.
CATALOG_DOES_NOT_DRAIN = {
    160: "catalog: Immediate Action IGNORE, Investigatory INVESTIGATE_SW",
    162: "catalog: no Immediate Action bucket (empty cell)",
}


def _catalog() -> list[tuple[int, str]]:
    rows = []
    for line in CODES_TSV.read_text(encoding="utf-8").splitlines():
        if not line or line.startswith("#"):
            continue
        code, _, bucket = line.partition("\t")  # an empty bucket may have lost its trailing tab
        rows.append((int(code), bucket.strip()))
    return rows


def test_the_yardstick_lists_each_code_once_with_a_known_bucket():
    rows = _catalog()
    codes = [code for code, _ in rows]
    assert len(rows) >= 172, "codes.tsv is truncated"
    assert codes == sorted(set(codes))
    unknown = {bucket for _, bucket in rows if bucket not in SOURCE_TO_OURS}
    assert not unknown, f"new catalog buckets need a megahour name: {sorted(unknown)}"


def test_every_catalog_code_is_in_the_data_with_its_bucket():
    missing = [code for code, _ in _catalog() if code not in ENTRIES]
    assert not missing, f"codes of the published catalog missing from ENTRIES: {missing}"
    wrong = {
        code: (bucket, ENTRIES[code][1])
        for code, bucket in _catalog()
        if ENTRIES[code][1] != SOURCE_TO_OURS.get(bucket)
    }
    assert not wrong, f"code: (catalog bucket, ENTRIES bucket): {wrong}"


def test_the_data_has_no_code_the_catalog_lacks():
    assert set(ENTRIES) - {code for code, _ in _catalog()} == set()


def test_entries_are_sorted_one_line_and_use_only_known_buckets():
    assert list(ENTRIES) == sorted(ENTRIES)
    for code, (mnemonic, bucket, description) in ENTRIES.items():
        assert bucket in BUCKETS, code
        assert mnemonic and description, code
        assert "\n" not in mnemonic + description and "  " not in mnemonic + description, code


def test_the_source_and_its_date_are_recorded():
    assert "docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html" in SOURCE
    assert re.search(r"\b[0-9a-f]{40}\b", SOURCE), "SOURCE names the commit it was read at"
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", SOURCE_DATE)


@pytest.mark.parametrize("code", MUST_DRAIN)
def test_must_drain_codes_are_in_the_catalog(code):
    assert code in ENTRIES


@pytest.mark.parametrize("code", [c for c in MUST_DRAIN if c not in CATALOG_DOES_NOT_DRAIN])
def test_must_drain_codes_drain(code):
    assert action_for(code) in DRAINS, ENTRIES[code]


def test_where_the_catalog_does_not_drain_megahour_follows_it():
    """160 and 162 drain in other tools' older tables (NVSentinel), not in NVIDIA's catalog.

    megahour keeps the catalog's word (docs/resilience.md says so); an inventory that wants them to
    drain sets ``xid_overrides``. When NVIDIA changes its mind this test fails and the table is revisited.
    """
    assert {code: ENTRIES[code][1] for code in CATALOG_DOES_NOT_DRAIN} == {160: "IGNORE", 162: "UNKNOWN"}
    assert action_for(160, {160: "RESET_GPU"}) in DRAINS


def test_application_faults_restart_the_application_not_the_node():
    assert ENTRIES[13][1] == "RESTART_APP"
    assert ENTRIES[31][1] == "RESTART_APP"
    assert ENTRIES[43][1] == "IGNORE"  # the catalog says IGNORE (the GPU stays healthy)
    assert ENTRIES[45][1] == "WORKFLOW_XID_45"  # "Solo: RESTART_FM / Not Solo: IGNORE (follow other Xid)"
