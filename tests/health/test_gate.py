"""Probes and gate entry points, driven through the real nvidia-smi test double."""

import json
import stat
import sys
from pathlib import Path

import pytest

from megahour.health import checks, gate, probes
from megahour.health.checks import Expectations
from megahour.health.config import ConfigError, DiskRule, HealthConfig, load
from megahour.health.suites import FULL, PROLOG, run_suite
from megahour.health.verdict import Status, gate_passes
from tests.conftest import REPO

DOUBLE = REPO / "roles" / "slurm_node" / "files" / "nvidia-smi-double"
HEALTHY = "0, NVIDIA H100 80GB HBM3, 00000000:0A:00.0, Enabled, Enabled, Enabled, 0, 0, 0"


def csv(fields, *rows):
    return ", ".join(fields) + "\n" + "".join(r + "\n" for r in rows)


@pytest.fixture
def node(tmp_path):
    """A fake GPU node: the double as nvidia-smi, a fixture dir, a kernel log, a state dir."""
    fixtures = tmp_path / "fake-gpu"
    fixtures.mkdir()
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\nMEGAHOUR_FAKE_GPU_DIR={fixtures} exec {sys.executable} {DOUBLE} "$@"\n')
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    kernel = tmp_path / "kernel.log"
    kernel.write_text("")

    def serve(gpu_rows=(HEALTHY,), remap=("GPU-a895322e-..., 0, 0, No, No",), apps=(), kernel_lines=()):
        commands = {}
        for name, query, fields, rows in (
            ("gpus.csv", "query-gpu", checks.GPU_FIELDS, gpu_rows),
            ("remap.csv", "query-remapped-rows", checks.REMAP_FIELDS, remap),
            ("apps.csv", "query-compute-apps", checks.COMPUTE_APP_FIELDS, apps),
        ):
            (fixtures / name).write_text(csv(fields, *rows))
            commands[f"--{query}={','.join(fields)} --format=csv"] = {"stdout": name, "rc": 0}
        (fixtures / "commands.json").write_text(json.dumps(commands))
        kernel.write_text("".join(line + "\n" for line in kernel_lines))

    config = HealthConfig(
        expect=Expectations(gpu_count=1, product_name="NVIDIA H100 80GB HBM3"),
        nvidia_smi=str(smi),
        kernel_log_command=("cat", str(kernel)),
        disks=(DiskRule(str(tmp_path), 1.0),),
        state_dir=str(tmp_path / "state"),
        metrics_dir=str(tmp_path / "metrics"),
    )
    serve()
    return config, serve, fixtures


def test_healthy_node_passes_both_suites(node):
    config, _, _ = node
    for suite in (PROLOG, FULL):
        verdicts = run_suite(config, suite)
        assert all(v.status is Status.PASS for v in verdicts), verdicts
    assert {v.check for v in run_suite(config, PROLOG)} >= {
        "gpu_inventory",
        "ecc",
        "memory_repair",
        "gpu_processes",
    }
    assert "xid" in {v.check for v in run_suite(config, FULL)}


def test_prolog_fails_on_injected_ecc_and_records_why(node):
    config, serve, _ = node
    serve(gpu_rows=(HEALTHY.replace(", 0, 0, 0", ", 0, 2, 2"),))
    assert gate.prolog(config, {"SLURM_JOB_ID": "42"}) == 1
    record = json.loads((Path(config.state_dir) / "prolog-42.json").read_text())
    assert record["passed"] is False
    assert "ecc_volatile_uncorrected" in {v["reason"] for v in record["verdicts"]}
    prom = (Path(config.metrics_dir) / "megahour_health_prolog.prom").read_text()
    assert (
        'megahour_health_check_ok{check="ecc",reason="ecc_volatile_uncorrected",'
        'status="FAIL",suite="prolog"} 0' in prom
    )


def test_prolog_fails_closed_when_the_driver_is_gone(node):
    config, _, fixtures = node
    (fixtures / "commands.json").unlink()  # the double now answers like a missing driver (exit 9)
    verdicts = run_suite(config, PROLOG)
    assert {v.reason for v in verdicts if v.check == "ecc"} == {"gpu_query_failed"}
    assert gate.prolog(config, {}) == 1


def test_leftover_process_blocks_only_the_prolog(node):
    config, serve, _ = node
    serve(apps=("4242, python, 1024 MiB",))
    assert gate.prolog(config, {}) == 1
    assert all(v.status is Status.PASS for v in run_suite(config, FULL))


def test_healthcheck_drains_with_our_prefix_once(node):
    config, serve, _ = node
    serve(remap=("GPU-a895322e-..., 0, 1, Yes, No",))
    drained = []
    assert gate.healthcheck(config, lambda n, r: drained.append((n, r)), lambda n: None, node="gpu-1") == 1
    assert drained[0][0] == "gpu-1" and drained[0][1].startswith("megahour:remap_pending ")
    # Already drained with the same reason: no second scontrol call.
    gate.healthcheck(config, lambda n, r: drained.append((n, r)), lambda n: drained[0][1], node="gpu-1")
    assert len(drained) == 1


def test_healthcheck_reads_xids_from_the_kernel_log(node):
    config, serve, _ = node
    fixture = (REPO / "tests/health/fixtures/kernel-xid79-fallen-off-bus.log").read_text().splitlines()
    serve(kernel_lines=fixture)
    drained = []
    gate.healthcheck(config, lambda n, r: drained.append(r), lambda n: None, node="gpu-2")
    assert drained and drained[0].startswith("megahour:xid_restart_bm")


def test_non_gpu_node_runs_only_host_checks(node):
    config, _, _ = node
    cpu_only = HealthConfig(
        expect=Expectations(gpu_count=0),
        nvidia_smi="/nonexistent",
        disks=config.disks,
        state_dir=config.state_dir,
    )
    verdicts = run_suite(cpu_only, FULL)
    assert [v.check for v in verdicts] == [f"disk:{config.disks[0].path}"]


def test_probe_timeout_and_failure_become_unknown(tmp_path):
    with pytest.raises(probes.ProbeError) as exc:
        probes.run([sys.executable, "-c", "import time; time.sleep(5)"], timeout=0.3)
    assert exc.value.reason == "probe_timeout"
    with pytest.raises(probes.ProbeError) as exc:
        probes.run([sys.executable, "-c", "import sys; sys.exit(3)"], timeout=5)
    assert exc.value.reason == "gpu_query_failed"
    assert exc.value.verdict("ecc").status is Status.UNKNOWN
    assert 0 < probes.free_percent(str(tmp_path), 2) <= 100
    with pytest.raises(probes.ProbeError):
        probes.free_percent(str(tmp_path / "missing"), 2)


def test_config_errors_name_the_fix(tmp_path):
    with pytest.raises(ConfigError, match="deploy the slurm_node role"):
        load(tmp_path / "absent.json")
    (tmp_path / "bad.json").write_text('{"nvidia_smi": "x"}')
    with pytest.raises(ConfigError, match="re-deploy"):
        load(tmp_path / "bad.json")
    (tmp_path / "ok.json").write_text(
        json.dumps(
            {
                "gpu_count": 8,
                "xid_overrides": {"109": "IGNORE"},
                "disks": [{"path": "/", "min_free_percent": 3}],
            }
        )
    )
    config = load(tmp_path / "ok.json")
    assert config.expect.xid_overrides == {109: "IGNORE"} and config.disks[0].min_free_percent == 3
    named = {"gpu_count": 8, "gpu_model": "h100", "product_name": "NVIDIA H100 80GB HBM3"}
    (tmp_path / "model.json").write_text(json.dumps(named))
    assert load(tmp_path / "model.json").expect.product_name == "NVIDIA H100 80GB HBM3"
    assert load(tmp_path / "model.json").outdated == ()


def test_a_config_from_an_older_role_warns_and_still_passes(node, tmp_path):
    """health.json written before slurm_node rendered product_name (an upgrade's first minutes): the gate
    passes with a WARN naming the fix, instead of draining every node until the role re-renders it."""
    import dataclasses

    config, serve, _ = node
    serve()
    path = tmp_path / "old-health.json"
    path.write_text(json.dumps({"gpu_count": config.expect.gpu_count, "gpu_model": "h100"}))
    old = load(path)
    assert old.expect.product_name is None
    current = dataclasses.replace(config, outdated=old.outdated)
    verdicts = run_suite(current, PROLOG)
    [warning] = [v for v in verdicts if v.check == "health_config"]
    assert (warning.status, warning.reason) == (Status.WARN, "config_outdated")
    assert "gpu_model 'h100' has no product_name" in warning.message
    assert "re-deploy the slurm_node role" in warning.message
    assert gate_passes(verdicts)


def test_xid_that_recurs_after_a_reboot_fails(node, monkeypatch):
    from megahour.health import xid_history

    config, serve, _ = node
    contained = (REPO / "tests/health/fixtures/kernel-xid94-contained-ecc.log").read_text().splitlines()
    serve(kernel_lines=contained)
    monkeypatch.setattr(xid_history, "current_boot_id", lambda: "boot-1")
    [xid] = [v for v in run_suite(config, FULL) if v.check == "xid"]
    assert xid.status is Status.WARN  # RESTART_APP, first time
    monkeypatch.setattr(xid_history, "current_boot_id", lambda: "boot-2")
    [xid] = [v for v in run_suite(config, FULL) if v.check == "xid"]
    assert (xid.status, xid.reason) == (Status.FAIL, "xid_recurring")


def test_nvme_mount_and_container_runtime_checks(node, tmp_path):
    import dataclasses

    from megahour.health.config import MountRule

    config, _, _ = node
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    checked = dataclasses.replace(
        config,
        mounts=(
            MountRule(str(tmp_path), require_mount=False),
            MountRule(str(tmp_path / "absent"), False),
            MountRule(str(tmp_path), require_mount=True),
        ),
        container_runtime_command=(sys.executable, "-c", "print('Failed to initialize NVML: Unknown Error')"),
    )
    reasons = [v.reason for v in run_suite(checked, PROLOG) if v.check.startswith(("mount:", "container"))]
    # tmp_path is a directory, not a mount point: fine unless a mount is required.
    assert reasons == ["ok", "mount_missing", "mount_missing", "container_nvml_error"]
    ok_runtime = dataclasses.replace(
        config, container_runtime_command=(sys.executable, "-c", "print('GPU 0: x')")
    )
    assert [v.reason for v in run_suite(ok_runtime, PROLOG) if v.check == "container_runtime"] == ["ok"]
    missing = dataclasses.replace(config, container_runtime_command=("/nonexistent/enroot", "version"))
    [verdict] = [v for v in run_suite(missing, PROLOG) if v.check == "container_runtime"]
    assert (verdict.status, verdict.reason) == (Status.FAIL, "container_runtime_failed")


def test_read_only_mount_fails():
    assert checks.mount("/x", {"exists": True, "is_mount": True, "writable": False}, True).reason == (
        "mount_readonly"
    )
    assert (
        checks.mount("/x", None, True, error="checking mount /x timed out after 5s").reason == "probe_timeout"
    )


def test_healthcheck_never_overwrites_someone_elses_drain(node):
    config, serve, _ = node
    serve(remap=("GPU-a895322e-..., 0, 1, Yes, No",))
    for current, expect_drain in (
        ("ops: cable check [admin@2026-11-29T10:00:00]", False),  # an operator's drain stays theirs
        ("Prolog error", True),  # Slurm's reason for our own failed Prolog: refine it
        ("megahour:ecc_volatile_uncorrected GPU 1: 2", True),  # ours, but a different fault now
        ("megahour:remap_pending GPU-a895322e-...: a row remap is pending", False),  # unchanged
        (None, True),
    ):
        drained, stamped = [], []
        gate.healthcheck(
            config,
            lambda n, r, out=drained: out.append(r),
            lambda n, c=current: c,
            node="gpu-1",
            publish=lambda n, s, out=stamped: out.append(s),
        )
        assert bool(drained) is expect_drain, current
        assert stamped and stamped[0].startswith("megahour-health:FAIL:remap_pending:")


def test_a_hung_disk_or_mount_probe_is_that_checks_unknown_verdict(node, monkeypatch):
    import dataclasses

    from megahour.health.config import MountRule

    config, _, _ = node

    def hung(path, timeout):
        raise probes.ProbeError("probe_timeout", f"checking {path} timed out after {timeout:g}s")

    monkeypatch.setattr(probes, "free_percent", hung)
    monkeypatch.setattr(probes, "mount_state", hung)
    checked = dataclasses.replace(config, disks=(DiskRule("/scratch", 5.0),), mounts=(MountRule("/nvme"),))
    verdicts = {v.check: v for v in run_suite(checked, PROLOG)}
    for check in ("disk:/scratch", "mount:/nvme"):
        assert (verdicts[check].status, verdicts[check].reason) == (Status.UNKNOWN, "probe_timeout")
        assert "timed out after" in verdicts[check].message
