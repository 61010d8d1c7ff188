"""CPU use around a timed read: this process's CPU seconds and the node's busy seconds (/proc/stat).

A read's rate per core used is its bytes over the node's busy CPU seconds, so a path whose work is in
other processes (the cache's Java workers and proxies) is charged for it. /proc/stat is not per
container: on the local podman cluster every node shares this machine, so the figure is the machine's,
every node's work on the read included, and anything else running counts too (run benchmarks alone).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

# The /proc/stat fields that count a CPU as busy (user nice system idle iowait irq softirq steal ...).
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)


@dataclass(frozen=True)
class CpuSample:
    wall: float
    process_s: float
    node_busy_s: float | None  # None where /proc/stat cannot be read


def _node_busy_s() -> float | None:
    try:
        with open("/proc/stat") as stat:
            fields = stat.readline().split()[1:]
    except OSError:
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return sum(int(fields[i]) for i in _BUSY_FIELDS if i < len(fields)) / ticks


def cpu_sample() -> CpuSample:
    return CpuSample(time.perf_counter(), time.process_time(), _node_busy_s())


def busy_between(before: CpuSample, after: CpuSample) -> float | None:
    """The node's busy CPU seconds from one sample to the next (None where /proc/stat was unreadable)."""
    if before.node_busy_s is None or after.node_busy_s is None:
        return None
    return after.node_busy_s - before.node_busy_s
