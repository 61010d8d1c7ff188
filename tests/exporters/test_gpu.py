"""The GPU collector on real `nvidia-smi -q` reports and kernel logs (tests/nvidia/fixtures/smi-q/SOURCES.md,
tests/health/fixtures/SOURCES.md)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from megahour.exporters import gpu
from megahour.health import kernel_log
from megahour.metrics.textfile import render
from megahour.nvidia import telemetry
from megahour.nvidia.smi_report import SmiReportError
from tests.conftest import REPO, tool

SMI_Q = REPO / "tests/nvidia/fixtures/smi-q"
H100X8 = REPO / "roles/nvidia/files/fake-gpu/h100-healthy/smi-q-8xH100.txt"
HEALTH = REPO / "tests/health/fixtures"
REPORTS = [H100X8, *sorted(SMI_Q.glob("*.txt"))]


def samples(families, name):
    family = next(f for f in families if f.name == name)
    return [(s.labels, s.value) for s in family.samples]


@pytest.mark.parametrize("path", REPORTS, ids=lambda p: p.name)
def test_every_real_report_gives_every_figure_of_every_gpu(path, check_metrics):
    text = path.read_text()
    report = telemetry.parse(text)
    attached = int(next(line.split(":")[1] for line in text.splitlines() if line.startswith("Attached GPUs")))
    assert len(report.gpus) == attached
    for one in report.gpus:
        assert one.missing == (), (one.bus_id, one.missing)
        assert one.figures["memory_total"] > 0 and one.figures["power_draw"] > 0
        assert 0 <= one.figures["utilization_gpu"] <= 1
        assert "Idle" in one.clock_reasons and ("corrected", "aggregate") in one.ecc
    check_metrics(render(gpu.families(report, [], now=1.0, kernel_log_ok=True)))


def test_the_h100_reports_figures_in_base_units():
    first = telemetry.parse(H100X8.read_text()).gpus[0]
    assert (first.index, first.bus_id, first.name) == (0, "00000000:18:00.0", "NVIDIA H100 80GB HBM3")
    assert first.figures == {
        "utilization_gpu": 0.0,
        "utilization_memory": 0.0,
        "memory_total": 81559 * 2**20,
        "memory_used": 1 * 2**20,
        "temperature_gpu": 30.0,
        "temperature_memory": 36.0,
        "power_draw": 100.89,
        "power_limit": 700.0,
        "clock_sm": 345e6,
        "clock_memory": 2619e6,
    }
    assert first.performance_state == "P0"
    assert first.clock_reasons["Idle"] is True and first.clock_reasons["HW Thermal Slowdown"] is False
    assert first.remapped_rows == {"correctable": 0, "uncorrectable": 0}
    assert (first.remap_pending, first.remap_failed) == (False, False)


def test_an_aggregate_corrected_error_is_counted():
    # The A10G's report: DRAM Correctable 1 in Aggregate, 0 in Volatile.
    (one,) = telemetry.parse((SMI_Q / "a10g-x1-persistence-off.txt").read_text()).gpus
    assert one.ecc[("corrected", "aggregate")] == 1 and one.ecc[("corrected", "volatile")] == 0
    assert one.ecc[("uncorrected", "aggregate")] == 0


def test_a_pending_remap_and_its_ecc_counts():
    # The sections an A100 printed after Xid 63 (driver 510), inside a one-GPU report's frame.
    sections = (HEALTH / "nvidia-smi-q-a100-remap-pending.txt").read_text()
    frame = "Driver Version                            : 510.73.08\nAttached GPUs : 1\n"
    text = f"{frame}GPU 00000000:07:00.0\n{sections}"
    (one,) = telemetry.parse(text).gpus
    assert one.ecc == {
        ("corrected", "volatile"): 177,
        ("uncorrected", "volatile"): 0,
        ("corrected", "aggregate"): 177,
        ("uncorrected", "aggregate"): 0,
    }
    assert one.remapped_rows == {"correctable": 1, "uncorrectable": 0} and one.remap_pending is True
    # what the frame lacks is named, not read as zero
    assert "utilization_gpu" in one.missing and "utilization_gpu" not in one.figures
    families = gpu.families(telemetry.parse(text), [], now=1.0, kernel_log_ok=True)
    assert ({"gpu": "0", "bus_id": "00000000:07:00.0", "field": "utilization_gpu"}, 1) in samples(
        families, "megahour_gpu_exporter_missing_fields"
    )
    assert samples(families, "megahour_gpu_utilization_ratio") == []


def test_older_section_names_are_read():
    # Drivers before r535 print "Clocks Throttle Reasons", before r530 "Power Readings".
    text = H100X8.read_text().replace("Clocks Event Reasons", "Clocks Throttle Reasons")
    text = text.replace("    GPU Power Readings", "    Power Readings")
    first = telemetry.parse(text).gpus[0]
    assert first.missing == () and first.figures["power_draw"] == 100.89 and "Idle" in first.clock_reasons


def test_a_truncated_report_is_refused():
    text = H100X8.read_text()
    with pytest.raises(SmiReportError, match="8 GPUs are attached but holds 7"):
        telemetry.parse(text[: text.rindex("\nGPU 0000")])


def test_xids_are_counted_by_gpu_and_code():
    report = telemetry.parse(H100X8.read_text())
    lines = (HEALTH / "kernel-xid48-dbe.log").read_text().splitlines()
    lines += [line.replace("0000:55:00", "0000:18:00") for line in lines]  # a second one, on GPU 0
    lines += (HEALTH / "kernel-xid79-fallen-off-bus.log").read_text().splitlines()
    family = gpu.xid_family(kernel_log.parse(lines), report.gpus)
    assert {tuple(sorted(s.labels.items())): s.value for s in family.samples} == {
        (("bus_id", "0000:05:00"), ("code", "79")): 1,
        (("bus_id", "0000:18:00"), ("code", "48"), ("gpu", "0")): 1,
        (("bus_id", "0000:55:00"), ("code", "48")): 1,
    }


def test_no_report_leaves_no_gpu_series(check_metrics):
    families = gpu.families(None, [], now=5.0, kernel_log_ok=True)
    assert [f.name for f in families] == [
        "megahour_gpu_exporter_ok",
        "megahour_gpu_exporter_last_run_timestamp_seconds",
        "megahour_gpu_exporter_kernel_log_ok",
    ]
    assert samples(families, "megahour_gpu_exporter_ok") == [({}, 0)]
    check_metrics(render(families))


def _cli(tmp_path: Path, report: str, rc: int = 0) -> subprocess.CompletedProcess[str]:
    """`megahour metrics gpu` against the nvidia-smi double, serving ``report`` for `-q`."""
    fixtures = tmp_path / "fake-gpu"
    fixtures.mkdir()
    (fixtures / "smi-q.txt").write_text(report)
    (fixtures / "commands.json").write_text(json.dumps({"-q": {"stdout": "smi-q.txt", "rc": rc}}))
    (fixtures / "kernel.log").write_text((HEALTH / "kernel-xid48-dbe.log").read_text())
    double = tmp_path / "nvidia-smi"
    double.write_bytes((REPO / "roles/nvidia/files/nvidia-smi-double").read_bytes())
    double.chmod(0o755)
    config = tmp_path / "health.json"
    config.write_text(
        json.dumps(
            {
                "gpu_count": 8,
                "nvidia_smi": str(double),
                "kernel_log_command": ["cat", str(fixtures / "kernel.log")],
                "metrics_dir": str(tmp_path / "textfile"),
            }
        )
    )
    (tmp_path / "textfile").mkdir()
    return subprocess.run(
        [tool("megahour"), "metrics", "gpu", "--config", str(config), "--json"],
        capture_output=True,
        text=True,
        env={"MEGAHOUR_FAKE_GPU_DIR": str(fixtures), "PATH": "/usr/bin:/bin"},
    )


def test_the_command_writes_the_textfile(tmp_path):
    proc = _cli(tmp_path, H100X8.read_text())
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert (result["ok"], result["gpus"], result["xid_events"]) == (True, 8, 1)
    text = (tmp_path / "textfile/megahour_gpu.prom").read_text()
    assert (
        "megahour_gpu_exporter_ok 1\n" in text
        and 'megahour_gpu_xid_events_total{bus_id="0000:55:00",code="48"} 1' in text
    )


def test_the_command_fails_closed_when_nvidia_smi_does(tmp_path):
    proc = _cli(tmp_path, "", rc=9)
    assert proc.returncode == 1
    assert "megahour metrics gpu: nvidia-smi -q:" in proc.stderr
    text = (tmp_path / "textfile/megahour_gpu.prom").read_text()
    assert "megahour_gpu_exporter_ok 0\n" in text and "megahour_gpu_info" not in text
