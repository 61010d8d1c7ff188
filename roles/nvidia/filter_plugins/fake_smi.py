"""The nvidia-smi double's ``-q`` report for a local cluster node (roles/nvidia/tasks/fake_gpu.yml).

The double serves real output only. A node that declares N GPUs gets the first N GPU blocks of a real
8-GPU ``nvidia-smi -q`` capture, with the header's ``Attached GPUs`` set to N (its column kept): blocks
are dropped, never invented or edited, so asking for more GPUs than the capture holds fails.
"""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError

_ATTACHED = re.compile(r"^(Attached GPUs\s+: )(\d+)$", re.MULTILINE)
_GPU_BLOCK = re.compile(r"^GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]\s*$", re.MULTILINE)


def smi_report_first_gpus(text, count):
    """``text`` (a real ``nvidia-smi -q`` report) cut to its first ``count`` GPUs."""
    count = int(count)
    starts = [m.start() for m in _GPU_BLOCK.finditer(text)]
    attached = _ATTACHED.search(text)
    if attached is None or int(attached.group(2)) != len(starts):
        raise AnsibleFilterError("smi_report_first_gpus: not a whole `nvidia-smi -q` report")
    if not 0 < count <= len(starts):
        raise AnsibleFilterError(
            f"smi_report_first_gpus: the capture holds {len(starts)} GPUs, the node declares {count}; "
            "declare at most that many fake GPUs (megahour_gpu.count)"
        )
    end = starts[count] if count < len(starts) else len(text)
    head = _ATTACHED.sub(lambda m: f"{m.group(1)}{count}", text[:end], count=1)
    # A blank line separates the blocks; a real report ends with its last block's line and one newline.
    return head if end == len(text) else head.rstrip("\n") + "\n"


class FilterModule:
    def filters(self):
        return {"smi_report_first_gpus": smi_report_first_gpus}
