"""megahour.nvidia.smi_report on real `nvidia-smi -q` reports (tests/nvidia/fixtures/smi-q/SOURCES.md)."""

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from megahour.nvidia.smi_report import SmiReportError, parse
from tests.conftest import REPO

FIXTURES = Path(__file__).parent / "fixtures" / "smi-q"
H100_X8 = REPO / "roles" / "nvidia" / "files" / "fake-gpu" / "h100-healthy" / "smi-q-8xH100.txt"


def read(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_an_hgx_h100_board_reports_driver_persistence_and_fabric_registration():
    report = parse(H100_X8.read_text())
    assert report.driver_version == "565.57.01" and report.driver_branch == 565
    assert len(report.gpus) == 8
    assert {g.product_name for g in report.gpus} == {"NVIDIA H100 80GB HBM3"}
    assert {g.persistence_mode for g in report.gpus} == {"Enabled"}
    assert {(g.fabric_state, g.fabric_status) for g in report.gpus} == {("Completed", "Success")}
    assert report.gpus[0].bus_id == "00000000:18:00.0" and report.gpus[7].bus_id == "00000000:DB:00.0"


@pytest.mark.parametrize(
    ("name", "driver", "count", "product", "persistence"),
    [
        ("a100-sxm4-x4.txt", "555.42.02", 4, "NVIDIA A100-SXM4-80GB", "Enabled"),
        ("l40s-x1.txt", "550.127.05", 1, "NVIDIA L40S", "Enabled"),
        ("h100-nvl-x2.txt", "550.54.14", 2, "NVIDIA H100 NVL", "Enabled"),
        ("a10g-x1-persistence-off.txt", "535.247.01", 1, "NVIDIA A10G", "Disabled"),
    ],
)
def test_reports_of_other_boards(name, driver, count, product, persistence):
    report = parse(read(name))
    assert (report.driver_version, len(report.gpus)) == (driver, count)
    assert {g.product_name for g in report.gpus} == {product}
    assert {g.persistence_mode for g in report.gpus} == {persistence}
    # No NVSwitch on these boards: the driver prints a Fabric section with nothing registered.
    assert {(g.fabric_state, g.fabric_status) for g in report.gpus} == {("N/A", "N/A")}


def test_a_report_filtered_to_one_gpu_is_refused_not_read_as_a_one_gpu_node():
    text = H100_X8.read_text()
    second = text.index("\nGPU 00000000:2A:00.0")
    with pytest.raises(SmiReportError, match="says 8 GPUs are attached but holds 1"):
        parse(text[:second] + "\n")


def test_other_text_is_refused():
    with pytest.raises(SmiReportError, match="Driver Version"):
        parse("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n")


def test_a_gpu_block_without_its_persistence_line_is_refused():
    text = read("l40s-x1.txt")
    line = next(li for li in text.splitlines(keepends=True) if "Persistence Mode" in li)
    with pytest.raises(SmiReportError, match="no Persistence Mode line"):
        parse(text.replace(line, ""))


@given(st.integers(min_value=1, max_value=7))
def test_any_truncation_at_a_gpu_block_is_refused(kept):
    text = H100_X8.read_text()
    starts = [i for i in range(len(text)) if text.startswith("\nGPU 0000", i)]
    with pytest.raises(SmiReportError, match=f"holds {kept} GPU blocks"):
        parse(text[: starts[kept]] + "\n")


def test_windows_line_endings_read_the_same():
    text = read("a100-sxm4-x4.txt")
    assert parse(text.replace("\n", "\r\n")) == parse(text)
