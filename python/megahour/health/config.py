"""Node health configuration, rendered by the slurm_node role to /etc/megahour/health.json."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from megahour.health.checks import Expectations
from megahour.health.rdma import SYSFS_ROOT, RdmaRule
from megahour.health.xid_catalog import XidAction, valid_override

DEFAULT_PATH = Path("/etc/megahour/health.json")


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class DiskRule:
    path: str
    min_free_percent: float = 5.0


@dataclass(frozen=True)
class MountRule:
    path: str
    require_mount: bool = True


@dataclass(frozen=True)
class HealthConfig:
    expect: Expectations
    nvidia_smi: str = "nvidia-smi"
    kernel_log_command: tuple[str, ...] = ("journalctl", "--dmesg", "--boot", "--no-pager", "--output=short")
    disks: tuple[DiskRule, ...] = ()
    mounts: tuple[MountRule, ...] = ()
    # The runtime jobs use, as a command that must succeed: e.g. ["enroot", "version"],
    # or a tiny container running `nvidia-smi -L`. Empty: jobs run no container.
    container_runtime_command: tuple[str, ...] = ()
    # The RDMA ports' expected state (from megahour_fabric); None: no RDMA fabric, no check.
    rdma: RdmaRule | None = None
    rdma_sysfs_root: str = str(SYSFS_ROOT)
    probe_timeout_s: float = 5.0
    # Budget for `dcgmi diag -r 1` in the Epilog; 0 turns it off (a visible WARN says so).
    dcgm_diag_timeout_s: float = 60.0
    state_dir: str = "/var/lib/megahour/health"
    drain_prefix: str = "megahour:"
    metrics_dir: str | None = None  # node_exporter textfile collector directory
    # What an older slurm_node role left out of the file: each a WARN verdict until the role re-renders it.
    outdated: tuple[str, ...] = ()
    extra: dict = field(default_factory=dict)

    @property
    def has_gpus(self) -> bool:
        return self.expect.gpu_count > 0


def _outdated(raw: dict) -> tuple[str, ...]:
    """Settings a health.json rendered by an older slurm_node role lacks, as messages naming the fix."""
    if raw.get("gpu_model") and not raw.get("product_name") and not raw.get("product_patterns"):
        # Not a failure: between the runtime's upgrade and slurm_node's re-render (the next play of the
        # same site.yml run) every node would otherwise drain. The model is unchecked until then.
        return (
            f"gpu_model {raw['gpu_model']!r} has no product_name or product_patterns, so the GPU model is "
            "not checked; re-deploy the slurm_node role "
            "(it renders the names nvidia-smi prints for the model)",
        )
    return ()


def _patterns(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    return tuple(str(v) for v in value or ()) if isinstance(value, list | tuple) else ()


def _rdma_rule(raw: dict | None) -> RdmaRule | None:
    if not raw:
        return None
    rate = raw.get("min_rate_gbps")
    return RdmaRule(
        link_layer=str(raw["link_layer"]),
        devices=tuple(str(d) for d in raw.get("devices") or ()),
        min_rate_gbps=None if rate is None else float(rate),
    )


def load(path: Path = DEFAULT_PATH) -> HealthConfig:
    try:
        raw = json.loads(Path(path).read_text())
    except FileNotFoundError as exc:
        raise ConfigError(
            f"{path} is missing; deploy the slurm_node role (it renders the health config)"
        ) from exc
    except ValueError as exc:
        raise ConfigError(f"{path} is not valid JSON: {exc}") from exc
    overrides = raw.get("xid_overrides") or {}
    bad = {k: v for k, v in overrides.items() if not str(k).isdigit() or not valid_override(str(v))}
    if bad:
        raise ConfigError(
            f"{path}: xid_overrides {bad} are not Xid numbers mapped to one of "
            f"{sorted(a.value for a in XidAction)}; fix megahour_health_xid_overrides in the inventory"
        )
    try:
        expect = Expectations(
            gpu_count=int(raw["gpu_count"]),
            product_name=raw.get("product_name") or None,
            product_patterns=_patterns(raw.get("product_patterns")),
            bus_ids=tuple(raw.get("bus_ids", ())),
            corrected_storm_threshold=int(raw.get("corrected_storm_threshold", 1000)),
            corrected_rate_drain_per_hour=float(
                raw.get("corrected_rate_drain_per_hour", Expectations.corrected_rate_drain_per_hour)
            ),
            require_persistence=bool(raw.get("require_persistence", True)),
            xid_overrides={int(k): str(v) for k, v in overrides.items()},
        )
        return HealthConfig(
            expect=expect,
            nvidia_smi=raw.get("nvidia_smi", "nvidia-smi"),
            kernel_log_command=tuple(raw.get("kernel_log_command", HealthConfig.kernel_log_command)),
            disks=tuple(
                DiskRule(d["path"], float(d.get("min_free_percent", 5.0))) for d in raw.get("disks", [])
            ),
            mounts=tuple(
                MountRule(m["path"], bool(m.get("require_mount", True))) for m in raw.get("mounts", [])
            ),
            container_runtime_command=tuple(str(a) for a in raw.get("container_runtime_command", [])),
            rdma=_rdma_rule(raw.get("rdma")),
            rdma_sysfs_root=str(raw.get("rdma_sysfs_root") or SYSFS_ROOT),
            probe_timeout_s=float(raw.get("probe_timeout_s", 5.0)),
            dcgm_diag_timeout_s=float(raw.get("dcgm_diag_timeout_s", HealthConfig.dcgm_diag_timeout_s)),
            state_dir=raw.get("state_dir", HealthConfig.state_dir),
            drain_prefix=raw.get("drain_prefix", "megahour:"),
            metrics_dir=raw.get("metrics_dir"),
            outdated=_outdated(raw),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{path}: bad or missing setting ({exc}); re-deploy the slurm_node role") from exc
