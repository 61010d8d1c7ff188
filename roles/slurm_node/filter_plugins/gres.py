"""gres.conf's GPU lines: one a GPU with its device file, local cores and NVLinks where the nvidia role read
them from the host (``nvidia_gpu_placements``, ``nvidia_gpu_links``), else one line for ``/dev/nvidia0`` to
``N-1``.

The derivation is ``megahour.nvidia.topology.gres_lines`` (on the control node, like slurm_client's filters).
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def gres_gpu_lines(placements, gres_type, count, links=None):
    """The ``Name=gpu`` lines of gres.conf for ``count`` GPUs of Slurm type ``gres_type`` (``links``: the
    nvidia role's NVLink matrix, by nvidia-smi index like ``placements``)."""
    try:
        from megahour.nvidia.topology import GpuPlacement, gres_lines
    except ImportError as exc:
        raise AnsibleFilterError(
            f"gres_gpu_lines needs the megahour package on the control node ({exc}); run `make venv`"
        ) from exc
    count = int(count)
    if count <= 0:
        return []
    known = [
        GpuPlacement(p.get("minor"), str(p.get("bus_id", "")), tuple(p["cores"]) if p.get("cores") else None)
        for p in placements or []
    ]
    lines = gres_lines(gres_type, known, links) if len(known) == count else None
    if lines is not None:
        return lines
    files = "/dev/nvidia0" if count == 1 else f"/dev/nvidia[0-{count - 1}]"
    return [f"Name=gpu Type={gres_type} File={files}"]


class FilterModule:
    def filters(self):
        return {"gres_gpu_lines": gres_gpu_lines}
