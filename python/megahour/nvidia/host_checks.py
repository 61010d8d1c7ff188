"""What a GPU node's NVIDIA stack must be before Slurm runs jobs on it, judged from what the host shows.

The ``nvidia`` role's ``preinstalled`` mode (a vendor image with the driver on it) gathers a
:class:`HostState` on the node (``nvidia-smi -q``, the systemd units, the loaded kernel modules) and
:func:`check` judges it against :class:`HostRequirements`, derived from the GPU profile and the fabric by
:func:`requirements`. Each :class:`Finding` that fails names the fix. Pure logic: no command runs here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from fnmatch import fnmatchcase
from typing import Any

from megahour.inventory.profiles import GpuProfile, known_models, profile_for
from megahour.nvidia.smi_report import SmiReport

PERSISTENCED = "nvidia-persistenced"
FABRIC_MANAGER = "nvidia-fabricmanager"
DCGM = "nvidia-dcgm"
PEERMEM = "nvidia_peermem"
# The board that joins its GPUs through NVSwitch (HGX/DGX) carries eight; a 4-GPU HGX A100 joins them by
# direct NVLink and runs no fabric manager.
NVSWITCH_BOARD_GPUS = 8
RDMA_FABRICS = ("infiniband", "roce")
# nvidia-smi's Fabric State where the driver reports none (pre-Hopper GPUs, PCIe cards).
_NO_FABRIC_STATE = (None, "N/A", "Not Supported")
_REGISTERED = ("Completed", "Success")
AUTO = "auto"


@dataclass(frozen=True)
class HostRequirements:
    model: str
    product_names: tuple[str, ...]
    gpu_count: int
    min_driver_branch: int
    persistence: bool = True
    fabric_manager: bool = False
    peermem: bool = False
    dcgm: bool = False


@dataclass(frozen=True)
class HostState:
    smi: SmiReport | None
    smi_error: str | None = None  # why there is no report: the command is missing, failed or unreadable
    active_units: frozenset[str] = frozenset()
    loaded_modules: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Finding:
    name: str
    ok: bool
    message: str
    fix: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# Inventory YAML gives true/false as booleans and auto as a string; "true"/"false" strings also come.
_WORDS = {"true": True, "yes": True, "false": False, "no": False}


def _switch(value: Any, auto: bool, name: str) -> bool:
    if value == AUTO:
        return auto
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in _WORDS:
        return _WORDS[value.lower()]
    raise ValueError(f"nvidia_{name} is {value!r}; set it to auto, true or false")


def requirements(
    profile: GpuProfile,
    gpu_count: int,
    fabric_type: str = "none",
    *,
    persistence: bool = True,
    fabric_manager: Any = AUTO,
    peermem: Any = AUTO,
    dcgm: bool = False,
) -> HostRequirements:
    """What the node needs: the fabric manager where an NVSwitch board is (auto), nvidia_peermem where the
    fabric is RDMA (auto: GPUDirect RDMA is what NCCL uses there), DCGM's host engine where asked for."""
    return HostRequirements(
        model=profile.model,
        product_names=profile.product_names,
        gpu_count=int(gpu_count),
        min_driver_branch=profile.min_driver_branch,
        persistence=bool(persistence),
        fabric_manager=_switch(
            fabric_manager, profile.nvswitch and int(gpu_count) >= NVSWITCH_BOARD_GPUS, "fabric_manager"
        ),
        peermem=_switch(peermem, fabric_type in RDMA_FABRICS, "peermem"),
        dcgm=bool(dcgm),
    )


def check(req: HostRequirements, state: HostState) -> list[Finding]:
    """Every finding, in the order a lab fixes them (driver first); none is skipped silently."""
    if state.smi is None:
        return [
            Finding(
                "driver",
                False,
                f"nvidia-smi gave no report ({state.smi_error or 'no output'})",
                f"install the NVIDIA driver, branch {req.min_driver_branch} or newer (nvidia_mode: install "
                "does it from the distribution's archive), and check `nvidia-smi -q` answers",
            )
        ]
    smi = state.smi
    out = [_driver(req, smi), _gpus(req, smi)]
    if req.persistence:
        out.append(_persistence(smi, state))
    if req.fabric_manager:
        out.append(_fabric_manager(smi, state))
    if req.peermem:
        out.append(
            _present(
                "peermem",
                PEERMEM in state.loaded_modules,
                f"{PEERMEM} is loaded (GPUDirect RDMA)",
                f"{PEERMEM} is not loaded, so NCCL cannot use GPUDirect RDMA on this RDMA fabric",
                f"modprobe {PEERMEM} and list it in /etc/modules-load.d/ (the driver ships it), or set "
                "nvidia_peermem: false",
            )
        )
    if req.dcgm:
        out.append(
            _present(
                "dcgm",
                DCGM in state.active_units,
                f"{DCGM} (DCGM's host engine) is active",
                f"{DCGM} (DCGM's host engine) is not active",
                f"install datacenter-gpu-manager and `systemctl enable --now {DCGM}`, "
                "or set nvidia_dcgm: false",
            )
        )
    return out


def _present(name: str, present: bool, ok_message: str, missing_message: str, fix: str) -> Finding:
    return Finding(name, True, ok_message) if present else Finding(name, False, missing_message, fix)


def _driver(req: HostRequirements, smi: SmiReport) -> Finding:
    branch = smi.driver_branch
    if branch is None:
        return Finding(
            "driver",
            False,
            f"driver version {smi.driver_version!r} does not start with a branch number",
            "check the NVIDIA driver is loaded (nvidia-smi -q)",
        )
    if branch < req.min_driver_branch:
        return Finding(
            "driver",
            False,
            f"driver {smi.driver_version} is branch {branch}, older than {req.min_driver_branch}, the oldest "
            f"that supports {req.model}",
            f"install driver branch {req.min_driver_branch} or newer (ask the vendor for a newer image, "
            f"or set nvidia_mode: install and nvidia_driver_version: '{req.min_driver_branch}.*')",
        )
    return Finding("driver", True, f"driver {smi.driver_version} (needs branch {req.min_driver_branch}+)")


def _gpus(req: HostRequirements, smi: SmiReport) -> Finding:
    names = {g.product_name for g in smi.gpus}
    strangers = sorted(n for n in names if not any(fnmatchcase(n, p) for p in req.product_names))
    if len(smi.gpus) != req.gpu_count:
        return Finding(
            "gpus",
            False,
            f"the driver sees {len(smi.gpus)} GPUs, the inventory declares {req.gpu_count}",
            "find the missing GPU (nvidia-smi -L; the kernel log for Xid or 'fallen off the bus') or fix "
            "megahour_gpu.count",
        )
    if strangers:
        return Finding(
            "gpus",
            False,
            f"GPU model {strangers} is not {req.model} ({list(req.product_names)})",
            f"fix megahour_gpu.model, or add the name to megahour_gpu_profiles.{req.model}.product_names",
        )
    return Finding("gpus", True, f"{len(smi.gpus)} x {req.model}")


def _persistence(smi: SmiReport, state: HostState) -> Finding:
    off = [g.bus_id for g in smi.gpus if g.persistence_mode != "Enabled"]
    if off:
        return Finding(
            "persistence",
            False,
            f"persistence mode is off on {', '.join(off)}: each job start re-initialises the GPUs",
            f"`systemctl enable --now {PERSISTENCED}` (the driver ships it), "
            "or set nvidia_persistence: false",
        )
    via = f" ({PERSISTENCED} active)" if PERSISTENCED in state.active_units else ""
    return Finding("persistence", True, f"persistence mode enabled on every GPU{via}")


def _fabric_manager(smi: SmiReport, state: HostState) -> Finding:
    if FABRIC_MANAGER not in state.active_units:
        return Finding(
            "fabric_manager",
            False,
            f"{FABRIC_MANAGER} is not active on an NVSwitch board: CUDA fails to initialise (error 802)",
            "install the fabric manager of the driver's branch and "
            f"`systemctl enable --now {FABRIC_MANAGER}`",
        )
    unready = [
        f"{g.bus_id} {g.fabric_state}/{g.fabric_status}"
        for g in smi.gpus
        if g.fabric_state not in _NO_FABRIC_STATE and (g.fabric_state, g.fabric_status) != _REGISTERED
    ]
    if unready:
        return Finding(
            "fabric_manager",
            False,
            f"GPUs not registered with the NVLink fabric: {', '.join(unready)}",
            f"wait a minute after {FABRIC_MANAGER} starts and re-run; if it stays so, read "
            f"`journalctl -u {FABRIC_MANAGER}` (its version must equal the driver's)",
        )
    return Finding("fabric_manager", True, f"{FABRIC_MANAGER} active, every GPU's fabric registration done")


def summary(findings: list[Finding]) -> str:
    """The failures, each with its fix, on one line; empty when every finding passed."""
    return "; ".join(f"{f.name}: {f.message}. Fix: {f.fix}" for f in findings if not f.ok)


def requirements_from_inventory(
    gpu: Mapping[str, Any],
    profiles_override: Mapping[str, Any] | None,
    fabric: Mapping[str, Any] | None,
    **switches: Any,
) -> HostRequirements | None:
    """From the inventory's megahour_gpu, megahour_gpu_profiles and megahour_fabric; None without a model."""
    model = gpu.get("model")
    if model is None or str(model).strip() == "":
        return None
    profile = profile_for(model, profiles_override or None)
    if profile is None:
        raise ValueError(
            f"unknown megahour_gpu.model {model!r}; use one of "
            f"{', '.join(known_models(profiles_override or None))}, or define it in megahour_gpu_profiles"
        )
    fabric_type = str((fabric or {}).get("type", "none"))
    return requirements(profile, int(gpu.get("count", 0)), fabric_type, **switches)
