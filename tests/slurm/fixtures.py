"""Output of the adapter's exact commands as Slurm 22.05 prints it (SLURM_TIME_FORMAT=standard)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

# sinfo --noheader --Node --format "%N|%t|%E|%H|%u"
# gpu-1 is in two partitions (gpu, debug), so it is printed twice.
SINFO = """\
ctl|idle|none|Unknown|Unknown
gpu-1|drain|megahour:ecc_volatile_uncorrected gpu=3 count=2|2026-11-29T13:42:29|root
gpu-1|drain|megahour:ecc_volatile_uncorrected gpu=3 count=2|2026-11-29T13:42:29|root
gpu-2|drng|megahour:remap_pending gpu=0|2026-11-29T13:50:00|root
gpu-3|drain|Kill task failed|2026-11-29T03:10:11|slurm
gpu-4|mix|none|Unknown|Unknown
gpu-5|drain*|megahour:probe_timeout|2026-11-29T12:00:00|root
gpu-6|drain|megahour:remap_failed gpu=1|2026-11-29T11:00:00|root
gpu-7|alloc|none|Unknown|Unknown
gpu-8|down*|Not responding|2026-11-29T14:01:02|slurm
gpu-9|idle~|none|Unknown|Unknown
"""

# scontrol show reservation --oneliner
RESERVATIONS = (
    "ReservationName=megahour-maint-1 StartTime=2026-11-29T14:00:00 EndTime=2026-11-29T15:00:00 "
    "Duration=01:00:00 Nodes=gpu-1 NodeCnt=1 CoreCnt=2 Features=(null) PartitionName=(null) "
    "Flags=MAINT,SPEC_NODES TRES=cpu=2 Users=root Groups=(null) Accounts=(null) Licenses=(null) "
    "State=ACTIVE BurstBuffer=(null) Watts=n/a MaxStartDelay=(null)\n"
    "ReservationName=megahour-maint-2 StartTime=2026-11-29T13:00:00 EndTime=2026-11-30T13:00:00 "
    "Duration=1-00:00:00 Nodes=gpu-[2,7] NodeCnt=2 CoreCnt=4 Features=(null) PartitionName=(null) "
    "Flags=MAINT,SPEC_NODES TRES=cpu=4 Users=root Groups=(null) Accounts=(null) Licenses=(null) "
    "State=ACTIVE BurstBuffer=(null) Watts=n/a MaxStartDelay=(null)\n"
    "ReservationName=team-demo StartTime=2026-11-29T08:00:00 EndTime=2026-11-29T20:00:00 "
    "Duration=12:00:00 Nodes=gpu-[3-4] NodeCnt=2 CoreCnt=4 Features=(null) PartitionName=gpu "
    "Flags=SPEC_NODES TRES=cpu=4 Users=alice,bob Groups=(null) Accounts=(null) Licenses=(null) "
    "State=ACTIVE BurstBuffer=(null) Watts=n/a MaxStartDelay=(null)\n"
)
NO_RESERVATIONS = "No reservations in the system\n"

# squeue --noheader --states=RUNNING,COMPLETING --format "%i|%N|%R"
SQUEUE = """\
4101|gpu-[2,7]|gpu-[2,7]
4102_3|gpu-4|gpu-4
4103|gpu-[10-11]|gpu-[10-11]
"""


# Real `sinfo --json` / `squeue --json` output of Debian 12's Slurm 22.05.8 (captures/SOURCES.md).
CAPTURES = Path(__file__).parent / "captures"


def capture(name: str) -> str:
    return (CAPTURES / name).read_text()


SINFO_JSON = capture("sinfo-mixed.json")  # gpu-1: 3 of 4 GPUs allocated...
SQUEUE_JSON = capture("squeue-mixed.json")  # ...held by jobs 7 (2) and 8 (1): nothing stale


def completed(args: Sequence[str], stdout: str = "", stderr: str = "", rc: int = 0):
    return subprocess.CompletedProcess(list(args), rc, stdout, stderr)


class FakeRunner:
    """Stands in for subprocess.run: answers by command, records every call.

    ``responses`` maps a command prefix ("sinfo", "scontrol show", "scontrol update") to
    (stdout, stderr, rc), or to a callable that raises (timeouts, missing binaries).
    """

    def __init__(self, responses: dict[str, tuple[str, str, int] | Callable[[list[str]], object]]):
        self.responses = responses
        self.calls: list[list[str]] = []
        self.kwargs: list[dict] = []

    def __call__(self, args, **kwargs):
        argv = list(args)
        self.calls.append(argv)
        self.kwargs.append(kwargs)
        command = " ".join(argv)
        for prefix in sorted(self.responses, key=len, reverse=True):
            if command.startswith(prefix):
                answer = self.responses[prefix]
                if callable(answer):
                    return answer(argv)
                stdout, stderr, rc = answer
                return completed(argv, stdout, stderr, rc)
        raise AssertionError(f"unexpected command {argv}")

    def commands(self, prefix: str) -> list[list[str]]:
        return [c for c in self.calls if " ".join(c).startswith(prefix)]


def healthy_runner(
    sinfo: str = SINFO,
    reservations: str = RESERVATIONS,
    squeue: str = SQUEUE,
    sinfo_json: str = SINFO_JSON,
    squeue_json: str = SQUEUE_JSON,
) -> FakeRunner:
    return FakeRunner(
        {
            "sinfo": (sinfo, "", 0),
            "sinfo --json": (sinfo_json, "", 0),
            "scontrol show reservation": (reservations, "", 0),
            "squeue": (squeue, "", 0),
            "squeue --json": (squeue_json, "", 0),
            "scontrol update": ("", "", 0),
            "scontrol delete": ("", "", 0),
            "scontrol reconfigure": ("", "", 0),
        }
    )
