"""Parsers on real nvidia-smi and kernel-log output, and on garbage (never raise)."""

import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from megahour.health import kernel_log, smi
from tests.conftest import REPO

FIXTURES = Path(__file__).parent / "fixtures"
SMI_SET = REPO / "roles" / "nvidia" / "files" / "fake-gpu" / "h100-healthy"


def _query_fields(args: str) -> list[str]:
    return args.split("--query-gpu=", 1)[1].split(" ", 1)[0].split(",")


def test_query_gpu_with_units_in_the_header():
    commands = json.loads((SMI_SET / "commands.json").read_text())
    args = next(a for a, e in commands.items() if e["stdout"] == "query-gpu-8xH100-row0.csv")
    fields = _query_fields(args)
    result = smi.parse_query_csv((SMI_SET / "query-gpu-8xH100-row0.csv").read_text(), fields)
    assert result.errors == []
    [row] = result.rows
    assert row["name"] == "NVIDIA H100 80GB HBM3"
    assert row["pci.bus_id"] == "00000000:0A:00.0"
    assert smi.as_number(row["power.draw.average"]) == 70.89
    assert smi.as_int(row["memory.total"]) == 81559
    assert smi.as_int(row["ecc.errors.uncorrected.volatile.total"]) == 0


def test_header_names_differ_from_requested_aliases_so_columns_map_by_position():
    text = (SMI_SET / "query-gpu-name-busid-vbios.csv").read_text()
    assert text.splitlines()[0] == "name, pci.bus_id, vbios_version"  # canonical, not gpu_name
    result = smi.parse_query_csv(text, ["gpu_name", "gpu_bus_id", "vbios_version"])
    assert result.rows == [
        {
            "gpu_name": "NVIDIA H100 80GB HBM3",
            "gpu_bus_id": "00000000:04:00.0",
            "vbios_version": "96.00.89.00.01",
        }
    ]


def test_noheader_nounits_gate_row():
    # imbue's exact gate query output shape
    result = smi.parse_query_csv(
        "0, 0, Enabled, Enabled\n",
        ["index", "ecc.errors.uncorrected.volatile.total", "ecc.mode.current", "ecc.mode.pending"],
        header=False,
    )
    assert result.rows[0]["ecc.mode.pending"] == "Enabled"


def test_remapped_rows_yes_no_fields():
    from megahour.health.checks import REMAP_FIELDS

    result = smi.parse_query_csv((FIXTURES / "remapped-rows-after-reset.csv").read_text(), REMAP_FIELDS)
    assert [r["remapped_rows.uncorrectable"] for r in result.rows] == ["0", "1"]
    assert {smi.as_flag(r["remapped_rows.pending"]) for r in result.rows} == {False}


def test_unavailable_cells_are_none_not_zero():
    for cell in ("N/A", "[N/A]", "[Not Supported]", "[Unknown Error]", "[GPU requires reset]", ""):
        assert smi.as_number(cell) is None and smi.as_flag(cell) is None
    assert smi.as_number("81559 MiB") == 81559 and smi.as_number("70.68 W") == 70.68


def test_wrong_cell_count_is_an_error_not_a_crash():
    result = smi.parse_query_csv("a, b\n1, 2, 3\n4, 5\n", ["a", "b"])
    assert result.rows == [{"a": "4", "b": "5"}]
    assert "3 cells, expected 2" in result.errors[0]


def _events(name):
    return kernel_log.parse((FIXTURES / f"kernel-{name}.log").read_text().splitlines())


def test_modern_xid_lines():
    [event] = _events("xid94-contained-ecc")
    assert (event.xid, event.pci, event.pid) == (94, "0000:0f:00", "2503421")
    [event] = _events("xid64-remap-failure")
    assert (event.xid, event.pid) == (64, "<unknown>")
    assert _events("xid13-ctime")[0].xid == 13
    assert _events("xid109-ctx-switch")[0].xid == 109
    assert _events("xid154-recovery-action")[0].message.startswith("GPU recovery action changed")
    assert _events("xid149-netir")[0].pci == "0009:01:00"
    assert _events("xid48-dbe")[0].xid == 48


def test_old_format_without_pci_prefix():
    [event] = _events("xid14-old-format")
    assert (event.xid, event.pci) == (14, "0000:03:00")


def test_fallen_off_the_bus_without_an_xid_number():
    [one] = _events("fallen-off-bus-one-line")
    assert (one.xid, one.pci) == (79, "0000:29:00")
    [multi] = _events("fallen-off-bus-multiline")
    assert (multi.xid, multi.pci, multi.line_number) == (79, "0000:18:00", 1)


def test_one_incident_reported_twice_counts_once():
    assert len(_events("xid79-journal-pair")) == 1


def test_non_xid_lines_are_ignored():
    assert _events("sxid") == [] and _events("pcie-limited") == []


def test_watermark_drops_events_before_a_driver_reload():
    lines = (FIXTURES / "kernel-xid64-remap-failure.log").read_text().splitlines()
    lines.append("[2397200.000000] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.161.07")
    assert kernel_log.current_events(lines) == []


@given(
    st.text(max_size=400),
    st.lists(st.sampled_from(["index", "name", "pci.bus_id"]), min_size=1, max_size=3),
    st.booleans(),
)
def test_csv_parser_never_raises(text, fields, header):
    result = smi.parse_query_csv(text, fields, header=header)
    assert all(set(row) == set(fields) for row in result.rows)


@given(st.lists(st.text(max_size=200), max_size=20))
def test_kernel_log_parser_never_raises(lines):
    for event in kernel_log.parse(lines):
        assert event.xid >= 0 and 1 <= event.line_number <= len(lines)


@given(st.text(max_size=30))
def test_cell_helpers_never_raise(cell):
    smi.as_number(cell), smi.as_int(cell), smi.as_flag(cell)
