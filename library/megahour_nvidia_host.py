#!/usr/bin/python
"""Ansible module: check a GPU node's NVIDIA stack against its GPU profile and fabric (read-only)."""

from __future__ import annotations

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.megahour_runtime import import_megahour

DOCUMENTATION = r"""
---
module: megahour_nvidia_host
short_description: Check the NVIDIA driver, persistence, fabric manager, nvidia_peermem and DCGM of a node
description:
  - Reads C(nvidia-smi -q), the systemd units C(nvidia-persistenced), C(nvidia-fabricmanager) and
    C(nvidia-dcgm), and C(/proc/modules), then judges them with C(megahour.nvidia.host_checks) against the
    merged GPU profile of O(gpu.model) and the fabric. Changes nothing, so it runs in check mode too.
  - Fails, with every failed finding and its fix in C(msg), when any finding fails and O(policy=fail).
  - Runs with an interpreter that imports megahour (on a node, the runtime role's venv).
options:
  gpu:
    description: The inventory's C(megahour_gpu) (model and count).
    type: dict
    required: true
  gpu_profiles:
    description: The inventory's C(megahour_gpu_profiles), merged over the built-in profiles.
    type: dict
    default: {}
  fabric:
    description: The inventory's C(megahour_fabric); an RDMA type asks for nvidia_peermem (auto).
    type: dict
    default: {type: none}
  persistence:
    description: Require persistence mode on every GPU.
    type: bool
    default: true
  fabric_manager:
    description: Require the fabric manager; C(auto) on an NVSwitch profile with eight GPUs a node.
    type: raw
    default: auto
  peermem:
    description: Require C(nvidia_peermem) loaded; C(auto) on an InfiniBand or RoCE fabric.
    type: raw
    default: auto
  dcgm:
    description: Require DCGM's host engine (C(nvidia-dcgm)) active.
    type: bool
    default: false
  nvidia_smi:
    description: The nvidia-smi command.
    type: str
    default: nvidia-smi
  policy:
    description: C(fail) fails the task on any failed finding; C(report) returns them (C(ok=false)).
    type: str
    choices: [fail, report]
    default: fail
author:
  - megahour developers
"""

EXAMPLES = r"""
- name: Check the vendor's NVIDIA stack
  megahour_nvidia_host:
    gpu: "{{ megahour_gpu }}"
    gpu_profiles: "{{ megahour_gpu_profiles | default({}) }}"
    fabric: "{{ megahour_fabric | default({'type': 'none'}) }}"
"""

RETURN = r"""
ok:
  description: True when every finding passed.
  returned: always
  type: bool
driver_version:
  description: The driver version nvidia-smi reports; empty when it gave no report.
  returned: always
  type: str
findings:
  description: Each check (name, ok, message, fix), driver first.
  returned: always
  type: list
  elements: dict
placements:
  description: >-
    Each GPU's minor number (/dev/nvidiaN), PCI bus id and the Slurm logical indexes of the cores local to
    it (null where sysfs does not say), for gres.conf; in nvidia-smi's index order.
  returned: always
  type: list
  elements: dict
links:
  description: >-
    The NVLinks between each pair of GPUs from `nvidia-smi topo -m`, by nvidia-smi index (-1 the GPU
    itself, 0 a PCIe path), for gres.conf's Links=; null where the matrix cannot be read completely.
  returned: always
  type: list
  elements: list
"""

MISSING_COMMAND = 127
PCI_DEVICES = "/sys/bus/pci/devices"
CPU_ROOT = "/sys/devices/system/cpu"


def _smi_report(module, smi_report, command):
    try:
        rc, out, err = module.run_command([command, "-q"])
    except OSError as exc:  # run_command raises for a missing executable on some Ansible releases
        return None, f"{command} cannot run: {exc}"
    if rc != 0:
        reason = "not installed" if rc == MISSING_COMMAND else f"exit {rc}"
        return None, f"{command} -q: {reason}: {(err or out).strip()[:300]}"
    try:
        return smi_report.parse(out), None
    except smi_report.SmiReportError as exc:
        return None, f"{command} -q printed a report megahour cannot read completely: {exc}"


def _active_units(module, units):
    # `systemctl is-active` prints one state per unit, in order, and exits non-zero if any is not active.
    _rc, out, _err = module.run_command(["systemctl", "is-active", *units])
    states = out.split()
    return frozenset(unit for unit, state in zip(units, states, strict=False) if state == "active")


def _loaded_modules():
    try:
        with open("/proc/modules") as handle:
            return frozenset(line.split(" ", 1)[0] for line in handle if line.strip())
    except OSError:
        return frozenset()


def _read(path):
    with open(path) as handle:
        return handle.read().strip()


def _cpu_topology():
    """Every CPU's (physical_package_id, core_id); empty when sysfs does not say."""
    out = {}
    try:
        names = os.listdir(CPU_ROOT)
    except OSError:
        return out
    for name in names:
        if not (name.startswith("cpu") and name[3:].isdigit()):
            continue
        base = os.path.join(CPU_ROOT, name, "topology")
        try:
            out[int(name[3:])] = (int(_read(f"{base}/physical_package_id")), int(_read(f"{base}/core_id")))
        except (OSError, ValueError):
            return {}
    return out


def _placements(topology_mod, report):
    """Each GPU's device minor and local cores; cores None where the host's sysfs has no answer (the
    local cluster's fake GPUs have no PCI device)."""
    cpus = _cpu_topology()
    out = []
    for gpu in report.gpus:
        cores = None
        try:
            path = os.path.join(PCI_DEVICES, topology_mod.pci_sysfs_name(gpu.bus_id), "local_cpulist")
            local = topology_mod.parse_cpulist(_read(path))
            cores = list(topology_mod.logical_cores(cpus, local)) if cpus else None
        except (OSError, ValueError):
            cores = None
        out.append({"minor": gpu.minor_number, "bus_id": gpu.bus_id, "cores": cores})
    return out


def _links(module, topology_mod, command, count):
    """The NVLink matrix, or None: an old driver without `topo -m`, or a matrix not of ``count`` GPUs."""
    try:
        rc, out, _err = module.run_command([command, "topo", "-m"])
    except OSError:
        return None
    if rc != 0:
        return None
    try:
        matrix = topology_mod.parse_topo_links(out)
    except ValueError as exc:
        module.warn(f"{command} topo -m: {exc}; gres.conf gets no Links=")
        return None
    return [list(row) for row in matrix] if len(matrix) == count else None


def main():
    module = AnsibleModule(
        argument_spec={
            "gpu": {"type": "dict", "required": True},
            "gpu_profiles": {"type": "dict", "default": {}},
            "fabric": {"type": "dict", "default": {"type": "none"}},
            "persistence": {"type": "bool", "default": True},
            "fabric_manager": {"type": "raw", "default": "auto"},
            "peermem": {"type": "raw", "default": "auto"},
            "dcgm": {"type": "bool", "default": False},
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
            "policy": {"type": "str", "choices": ["fail", "report"], "default": "fail"},
        },
        supports_check_mode=True,
    )
    host_checks = import_megahour(module, "nvidia.host_checks")
    smi_report = import_megahour(module, "nvidia.smi_report")
    topology = import_megahour(module, "nvidia.topology")
    params = module.params
    try:
        req = host_checks.requirements_from_inventory(
            params["gpu"],
            params["gpu_profiles"],
            params["fabric"],
            persistence=params["persistence"],
            fabric_manager=params["fabric_manager"],
            peermem=params["peermem"],
            dcgm=params["dcgm"],
        )
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    if req is None:
        nothing = {"ok": True, "driver_version": "", "findings": [], "placements": [], "links": None}
        module.exit_json(changed=False, skipped_reason="no GPU model", **nothing)
    report, error = _smi_report(module, smi_report, params["nvidia_smi"])
    state = host_checks.HostState(
        smi=report,
        smi_error=error,
        active_units=_active_units(
            module, [host_checks.PERSISTENCED, host_checks.FABRIC_MANAGER, host_checks.DCGM]
        ),
        loaded_modules=_loaded_modules(),
    )
    findings = host_checks.check(req, state)
    result = {
        "changed": False,
        "ok": all(f.ok for f in findings),
        "driver_version": report.driver_version if report else "",
        "findings": [f.to_dict() for f in findings],
        "placements": _placements(topology, report) if report else [],
        "links": _links(module, topology, params["nvidia_smi"], len(report.gpus)) if report else None,
    }
    if not result["ok"] and params["policy"] == "fail":
        module.fail_json(msg=f"NVIDIA stack of {req.model}: {host_checks.summary(findings)}", **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
