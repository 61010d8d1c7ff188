"""Health rules: each reason code, the fail-closed paths, and the catalog pinned."""

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from megahour.health import checks, smi
from megahour.health.checks import GPU_FIELDS, REMAP_FIELDS, Expectations
from megahour.health.verdict import Status, Verdict, gate_passes, worst
from megahour.health.xid_catalog import CATALOG, CATALOG_VERSION, XidAction

FIXTURES = Path(__file__).parent / "fixtures"
H100 = Expectations(gpu_count=2, product_name="NVIDIA H100 80GB HBM3")
HEALTHY = ["0", "NVIDIA H100 80GB HBM3", "00000000:0A:00.0", "Enabled", "Enabled", "Enabled", "0", "0", "0"]


def gpu_rows(*overrides: dict) -> smi.CsvResult:
    rows = []
    for index, override in enumerate(overrides):
        row = dict(zip(GPU_FIELDS, HEALTHY, strict=True), index=str(index))
        row.update(override)
        rows.append(row)
    return smi.CsvResult(rows=rows)


def test_healthy_gpus_pass_inventory_and_ecc():
    result = gpu_rows({}, {"pci.bus_id": "00000000:0B:00.0"})
    assert checks.gpu_inventory(result, H100).status is Status.PASS
    assert checks.ecc(result, H100).status is Status.PASS


def test_inventory_count_model_and_bus_ids():
    assert checks.gpu_inventory(gpu_rows({}), H100).reason == "gpu_count_mismatch"
    other = gpu_rows({}, {"name": "NVIDIA A100-SXM4-80GB"})
    assert checks.gpu_inventory(other, H100).reason == "gpu_model_mismatch"
    pinned = Expectations(gpu_count=2, bus_ids=("00000000:0A:00.0", "00000000:0C:00.0"))
    assert checks.gpu_inventory(gpu_rows({}, {"pci.bus_id": "00000000:0B:00.0"}), pinned).reason == (
        "gpu_bus_ids_mismatch"
    )


def test_the_profile_patterns_accept_every_variant_of_the_model_and_nothing_else():
    from megahour.inventory.profiles import BUILTIN

    h100 = Expectations(gpu_count=2, product_patterns=BUILTIN["h100"].product_names)
    nvl = gpu_rows({"name": "NVIDIA H100 NVL"}, {"name": "NVIDIA H100 NVL"})
    assert checks.gpu_inventory(nvl, h100).status is Status.PASS
    mixed = gpu_rows({}, {"name": "NVIDIA H200"})
    verdict = checks.gpu_inventory(mixed, h100)
    assert (verdict.reason, verdict.evidence["models"]) == (
        "gpu_model_mismatch",
        ["NVIDIA H100 80GB HBM3", "NVIDIA H200"],
    )
    assert "['NVIDIA H200']" in verdict.message
    wildcard = Expectations(gpu_count=1, product_patterns=("NVIDIA B300*",))
    assert checks.gpu_inventory(gpu_rows({"name": "NVIDIA B300 SXM6 AC"}), wildcard).status is Status.PASS


def test_volatile_uncorrected_ecc_fails_with_evidence():
    verdict = checks.ecc(gpu_rows({}, {"ecc.errors.uncorrected.volatile.total": "3"}), H100)
    assert (verdict.status, verdict.reason) == (Status.FAIL, "ecc_volatile_uncorrected")
    assert verdict.evidence["gpu"] == "1" and verdict.evidence["volatile_uncorrected"] == 3


def test_aggregate_uncorrected_alone_is_only_evidence():
    assert checks.ecc(gpu_rows({"ecc.errors.uncorrected.aggregate.total": "5"}), H100).status is Status.PASS


def test_corrected_storm_warns_never_fails():
    verdict = checks.ecc(gpu_rows({"ecc.errors.corrected.volatile.total": "250000"}), H100)
    assert (verdict.status, verdict.reason) == (Status.WARN, "ecc_corrected_storm")


def test_persistence_off_is_unknown_not_pass():
    verdict = checks.ecc(gpu_rows({"persistence_mode": "Disabled"}), H100)
    assert (verdict.status, verdict.reason) == (Status.UNKNOWN, "persistence_mode_off")


def test_ecc_mode_pending_change_fails():
    assert checks.ecc(gpu_rows({"ecc.mode.pending": "Disabled"}), H100).reason == "ecc_mode_disabled"


def test_unreadable_counters_fail_closed():
    verdict = checks.ecc(gpu_rows({"ecc.errors.uncorrected.volatile.total": "[Unknown Error]"}), H100)
    assert verdict.status is Status.UNKNOWN
    assert checks.ecc(smi.CsvResult(errors=["no output"]), H100).status is Status.UNKNOWN


def _remap(pending="No", failure="No"):
    text = (FIXTURES / "remapped-rows-after-reset.csv").read_text()
    result = smi.parse_query_csv(text, REMAP_FIELDS)
    # Fault injection: one cell of the real capture changed.
    result.rows[1]["remapped_rows.pending"] = pending
    result.rows[1]["remapped_rows.failure"] = failure
    return result


def test_memory_repair_pass_pending_and_failed():
    assert checks.memory_repair(_remap()).status is Status.PASS
    assert checks.memory_repair(_remap(pending="Yes")).reason == "remap_pending"
    assert checks.memory_repair(_remap(pending="Yes", failure="Yes")).reason == "remap_failed"


def test_retired_pages_checked_only_when_remapping_is_not_available():
    remap_na = smi.CsvResult(rows=[dict.fromkeys(REMAP_FIELDS, "[N/A]")])
    retired = smi.CsvResult(rows=[{"pci.bus_id": "0", "retired_pages.pending": "Yes"}])
    assert checks.memory_repair(remap_na, retired).reason == "retired_pages_pending"
    assert checks.memory_repair(_remap(), retired).status is Status.PASS


def test_leftover_gpu_process():
    assert checks.leftover_processes(smi.CsvResult()).status is Status.PASS
    verdict = checks.leftover_processes(smi.CsvResult(rows=[{"pid": "4242"}]))
    assert verdict.reason == "leftover_gpu_process" and verdict.evidence["pids"] == ["4242"]


def _xid(name, **kwargs):
    lines = (FIXTURES / f"kernel-{name}.log").read_text().splitlines()
    return checks.xid(lines, H100, **kwargs)


def test_xid_classification_follows_the_catalog():
    assert _xid("xid94-contained-ecc").status is Status.WARN  # RESTART_APP
    assert _xid("xid64-remap-failure").reason == "xid_reset_gpu"
    assert _xid("xid79-fallen-off-bus").reason == "xid_restart_bm"
    assert _xid("fallen-off-bus-multiline").reason == "xid_restart_bm"
    assert _xid("xid48-dbe").reason == "xid_needs_investigation"
    assert _xid("xid63-row-remapper").status is Status.PASS  # IGNORE
    # NVLink5: the driver prints "Nonfatal", the catalog's NVLink workflow says a person must look.
    assert _xid("xid145-rlw").reason == "xid_needs_investigation"
    assert _xid("xid149-netir").reason == "xid_needs_investigation"
    assert _xid("xid13-ctime").reason == "xid_restart_app"
    assert _xid("xid109-ctx-switch").evidence["catalog"] == CATALOG_VERSION


def test_inventory_override_wins_over_the_catalog():
    relaxed = Expectations(gpu_count=2, xid_overrides={109: "IGNORE"})
    lines = (FIXTURES / "kernel-xid109-ctx-switch.log").read_text().splitlines()
    assert checks.xid(lines, relaxed).status is Status.PASS


def test_xid_recurring_after_reboot_escalates_hardware_classes_only():
    verdict = _xid("xid64-remap-failure", earlier_boots={("0000:0f:00", 64)})
    assert (verdict.status, verdict.reason) == (Status.FAIL, "xid_recurring")
    # An application's fault recurs whenever the program does: never a permanent drain.
    assert _xid("xid94-contained-ecc", earlier_boots={("0000:0f:00", 94)}).reason == "xid_restart_app"
    assert _xid("xid13-ctime", earlier_boots={("0000:cb:00", 13)}).reason == "xid_restart_app"
    assert _xid("xid63-row-remapper", earlier_boots={("0000:10:1c", 63)}).status is Status.PASS


def test_catalog_is_pinned():
    assert CATALOG_VERSION == "nvidia-xid-catalog-2025-10-29"
    assert CATALOG[79] is XidAction.RESTART_BM and CATALOG[63] is XidAction.IGNORE
    assert CATALOG[45] is XidAction.CHANNEL_TEARDOWN and CATALOG[154] is XidAction.INFORMATIONAL
    assert {13, 31}.issubset({x for x, a in CATALOG.items() if a is XidAction.RESTART_APP})


def test_disk_rules():
    assert checks.disk("/scratch", 40.0, 10).status is Status.PASS
    assert checks.disk("/scratch", 2.0, 10).reason == "disk_full"
    assert checks.disk("/nfs", None, 10, error="timed out after 2s").reason == "probe_timeout"


def test_gate_fails_closed():
    ok = Verdict("a", Status.PASS, "ok")
    warn = Verdict("b", Status.WARN, "ecc_corrected_storm")
    unknown = Verdict("c", Status.UNKNOWN, "probe_timeout")
    assert gate_passes([ok, warn])
    assert not gate_passes([ok, unknown]) and not gate_passes([])
    assert worst([ok, warn, unknown]).reason == "probe_timeout"


cells = st.sampled_from(["0", "3", "N/A", "[N/A]", "Yes", "No", "Enabled", "Disabled", "", "x", "1e9", "-1"])


@given(st.lists(st.fixed_dictionaries({f: cells for f in GPU_FIELDS}), max_size=4))
def test_rules_never_raise_on_arbitrary_cells(rows):
    result = smi.CsvResult(rows=rows)
    for verdict in (checks.gpu_inventory(result, H100), checks.ecc(result, H100)):
        assert verdict.reason and verdict.status in Status


def test_recovery_action_from_xid_154():
    line = (FIXTURES / "kernel-xid154-recovery-action.log").read_text().splitlines()
    verdict = checks.recovery_action(line)
    assert (verdict.status, verdict.reason) == (Status.FAIL, "gpu_recovery_action")
    assert verdict.evidence["gpus"] == {"0009:01:00": "Drain and Reset"}
    # The driver reports the action cleared (a real line's shape, values swapped back).
    cleared = [
        *line,
        line[0].replace(
            "from 0x0 (None) to 0x4 (Drain and Reset)", "from 0x4 (Drain and Reset) to 0x0 (None)"
        ),
    ]
    assert checks.recovery_action(cleared).status is Status.PASS
    reloaded = [*line, "[171200.000000] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.161.07"]
    assert checks.recovery_action(reloaded).status is Status.PASS
    assert checks.recovery_action([]).status is Status.PASS
