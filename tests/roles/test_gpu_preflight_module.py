"""The gpu_preflight module through `ansible localhost`, with a stand-in megahour command."""

import json

import pytest

from tests.conftest import tool

pytestmark = pytest.mark.integration

HEALTHY = {"passed": True, "suite": "full", "verdicts": [{"check": "ecc", "status": "PASS", "reason": "ok"}]}
REMAP_FAILED = {
    "passed": False,
    "suite": "full",
    "verdicts": [
        {"check": "ecc", "status": "PASS", "reason": "ok"},
        {
            "check": "memory_repair",
            "status": "FAIL",
            "reason": "remap_failed",
            "message": "GPU-x: remap failed",
        },
    ],
}


def fake_megahour(tmp_path, report, rc):
    path = tmp_path / "megahour"
    path.write_text(f"#!/bin/sh\ncat <<'EOF'\n{json.dumps(report)}\nEOF\nexit {rc}\n")
    path.chmod(0o755)
    return path


def preflight(run, megahour, policy):
    args = f"megahour={megahour} policy={policy}"
    proc = run(
        [
            tool("ansible"),
            "localhost",
            "-m",
            "gpu_preflight",
            "-a",
            args,
            "-e",
            "ansible_python_interpreter={{ ansible_playbook_python }}",
            "-o",
        ]
    )
    return proc.returncode, proc.stdout + proc.stderr


def test_healthy_node_passes(run, tmp_path):
    rc, out = preflight(run, fake_megahour(tmp_path, HEALTHY, 0), "fail")
    assert rc == 0 and '"healthy": true' in out


def test_policy_fail_stops_with_reason_and_fix(run, tmp_path):
    rc, out = preflight(run, fake_megahour(tmp_path, REMAP_FAILED, 1), "fail")
    assert rc != 0
    assert (
        "GPU preflight failed: remap_failed: GPU-x: remap failed" in out and "preflight_policy: report" in out
    )


def test_policy_report_reports_without_failing(run, tmp_path):
    rc, out = preflight(run, fake_megahour(tmp_path, REMAP_FAILED, 1), "report")
    assert rc == 0 and '"healthy": false' in out and '"reason": "remap_failed"' in out


def test_no_verdicts_fails_closed_even_when_reporting(run, tmp_path):
    broken = tmp_path / "megahour"
    broken.write_text("#!/bin/sh\necho 'Traceback: boom' >&2\nexit 1\n")
    broken.chmod(0o755)
    rc, out = preflight(run, broken, "report")
    assert rc != 0 and "gave no verdicts" in out


def test_unreadable_verdicts_fail_closed_even_when_reporting(run, tmp_path):
    odd = {"passed": True, "suite": "full", "verdicts": [{"check": "ecc", "status": "FINE", "reason": "ok"}]}
    rc, out = preflight(run, fake_megahour(tmp_path, odd, 0), "report")
    assert rc != 0 and "gave no verdicts" in out


def test_the_worst_verdict_decides_the_reason(run, tmp_path):
    mixed = {
        "passed": False,
        "suite": "full",
        "verdicts": [
            {"check": "disk", "status": "WARN", "reason": "disk_low"},
            {"check": "xid", "status": "UNKNOWN", "reason": "kernel_log_unreadable"},
            {"check": "ecc", "status": "FAIL", "reason": "ecc_volatile_uncorrected", "message": "GPU-1"},
        ],
    }
    rc, out = preflight(run, fake_megahour(tmp_path, mixed, 1), "report")
    assert rc == 0 and '"reason": "ecc_volatile_uncorrected"' in out
