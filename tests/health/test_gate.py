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

DOUBLE = REPO / "roles" / "nvidia" / "files" / "nvidia-smi-double"
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
    assert "gpu_model 'h100' has no product_name or product_patterns" in warning.message
    assert "re-deploy the slurm_node role" in warning.message
    assert gate_passes(verdicts)


def test_xid_that_recurs_after_a_reboot_fails(node, monkeypatch):
    from megahour.health import xid_history

    config, serve, _ = node
    fixtures = REPO / "tests/health/fixtures"
    contained = (fixtures / "kernel-xid94-contained-ecc.log").read_text().splitlines()
    remap_failure = (fixtures / "kernel-xid64-remap-failure.log").read_text().splitlines()
    serve(kernel_lines=contained + remap_failure)
    monkeypatch.setattr(xid_history, "current_boot_id", lambda: "boot-1")
    [xid] = [v for v in run_suite(config, FULL) if v.check == "xid"]
    assert xid.reason == "xid_reset_gpu"  # first time: the catalog's action
    monkeypatch.setattr(xid_history, "current_boot_id", lambda: "boot-2")
    [xid] = [v for v in run_suite(config, FULL) if v.check == "xid"]
    assert (xid.status, xid.reason, xid.evidence["xid"]) == (Status.FAIL, "xid_recurring", 64)
    # The application-class Xid 94 alone, seen in both earlier boots, stays a warning.
    serve(kernel_lines=contained)
    monkeypatch.setattr(xid_history, "current_boot_id", lambda: "boot-3")
    [xid] = [v for v in run_suite(config, FULL) if v.check == "xid"]
    assert (xid.status, xid.reason) == (Status.WARN, "xid_restart_app")


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


XID79 = REPO / "tests/health/fixtures/kernel-xid79-fallen-off-bus.log"


def test_the_prolog_reads_the_kernel_log_so_a_fresh_xid_stops_the_next_job(node):
    config, serve, _ = node
    serve(kernel_lines=XID79.read_text().splitlines())
    assert gate.prolog(config, {"SLURM_JOB_ID": "7"}) == 1
    record = json.loads((Path(config.state_dir) / "prolog-7.json").read_text())
    assert "xid_restart_bm" in {v["reason"] for v in record["verdicts"]}


def test_the_epilog_drains_with_our_reason_itself(node):
    from megahour.slurm.client import SlurmQueryError

    config, serve, _ = node
    drained = []
    env = {"SLURM_JOB_ID": "9", "SLURMD_NODENAME": "gpu-3"}
    assert gate.epilog(config, env, lambda n, r: drained.append((n, r)), lambda n: None) == 0
    assert drained == []  # healthy: DCGM absent here is a visible WARN, not a failure
    record = json.loads((Path(config.state_dir) / "epilog-9.json").read_text())
    assert {v["check"]: v["reason"] for v in record["verdicts"]}["dcgm_diag"] == "dcgm_absent"

    serve(kernel_lines=XID79.read_text().splitlines())
    # Slurm's own reason for a failed hook is ours to refine; exit 0, or Slurm would write "Epilog error".
    assert gate.epilog(config, env, lambda n, r: drained.append((n, r)), lambda n: "Prolog error") == 0
    assert drained[0][0] == "gpu-3" and drained[0][1].startswith("megahour:xid_restart_bm ")

    def unreachable(node, reason):
        raise SlurmQueryError(["scontrol"], "", "timed out after 10s")

    # Our drain failed: exit 1 so Slurm drains the node anyway (fail closed).
    assert gate.epilog(config, env, unreachable, lambda n: None) == 1
    # An operator's drain is never overwritten, and the job's node still leaves cleanly.
    assert gate.epilog(config, env, lambda n, r: drained.append((n, r)), lambda n: "ops:cable") == 0
    assert len(drained) == 1


def test_corrected_ecc_rate_is_a_metric_and_drains_above_its_limit(node, monkeypatch):
    from megahour.health import suites

    config, serve, _ = node
    monkeypatch.setattr(suites, "uptime_seconds", lambda: 7200.0)  # two hours since boot
    serve(gpu_rows=(HEALTHY.replace(", 0, 0, 0", ", 900, 0, 0"),))
    gate.record(config, "last-healthcheck", FULL, run_suite(config, FULL))
    metrics = (Path(config.metrics_dir) / "megahour_health_full.prom").read_text()
    assert 'megahour_gpu_ecc_corrected_per_hour{gpu="0",suite="full"} 450' in metrics
    # The published case: > 250,000 corrected errors. In two hours that is a storm; the node drains.
    serve(gpu_rows=(HEALTHY.replace(", 0, 0, 0", ", 250001, 0, 0"),))
    [ecc] = [v for v in run_suite(config, FULL) if v.check == "ecc"]
    assert (ecc.status, ecc.reason) == (Status.FAIL, "ecc_corrected_rate")
    assert ecc.evidence["corrected_per_hour"] == {"0": 125000.5}
    # The same count over 30 days is a slow leak: a WARN by count, no drain.
    monkeypatch.setattr(suites, "uptime_seconds", lambda: 30 * 86400.0)
    [ecc] = [v for v in run_suite(config, FULL) if v.check == "ecc"]
    assert (ecc.status, ecc.reason) == (Status.WARN, "ecc_corrected_storm")


def test_pre_ampere_gpus_are_judged_by_retired_pages(node):
    config, serve, fixtures = node
    serve(remap=("GPU-a895322e-..., [N/A], [N/A], [N/A], [N/A]",))
    commands = json.loads((fixtures / "commands.json").read_text())
    (fixtures / "retired.csv").write_text(csv(checks.RETIRED_FIELDS, "00000000:0A:00.0, 3, 1, Yes"))
    retired_args = f"--query-gpu={','.join(checks.RETIRED_FIELDS)} --format=csv"
    commands[retired_args] = {"stdout": "retired.csv", "rc": 0}
    (fixtures / "commands.json").write_text(json.dumps(commands))
    [repair] = [v for v in run_suite(config, PROLOG) if v.check == "memory_repair"]
    assert (repair.status, repair.reason) == (Status.FAIL, "retired_pages_pending")
    # Neither reading works: fail closed.
    del commands[retired_args]
    (fixtures / "commands.json").write_text(json.dumps(commands))
    [repair] = [v for v in run_suite(config, PROLOG) if v.check == "memory_repair"]
    assert repair.status is Status.UNKNOWN


def test_bad_xid_overrides_name_the_inventory_setting(tmp_path):
    path = tmp_path / "health.json"
    path.write_text(json.dumps({"gpu_count": 1, "xid_overrides": {"45": "NEVER"}}))
    with pytest.raises(ConfigError, match="megahour_health_xid_overrides"):
        load(path)
    path.write_text(json.dumps({"gpu_count": 1, "xid_overrides": {"45": "IGNORE", "154": "INFORMATIONAL"}}))
    assert load(path).expect.xid_overrides == {45: "IGNORE", 154: "INFORMATIONAL"}
