"""The on-disk contract between a training job and the `megahour run` wrapper around it.

Both sides live above this module (``train`` writes checkpoints and attempt logs, ``run`` watches
them and writes its own traces), so the names they must agree on live here, below both:

- a checkpoint directory counts only once its writer has dropped ``COMPLETE_MARKER`` inside it,
  atomically and last;
- the checkpoint root reaches both through ``CHECKPOINT_DIR_ENV``;
- every attempt of a job, in-place restart or Slurm requeue, gets the next ``attempt-<k>`` directory;
- a rank that lost a peer (a collective failed because another rank died) exits ``PEER_LOST_EXIT``,
  which the wrapper treats as transient: the whole step restarts, not only the rank that died;
- the wrapper tells each attempt of the step its in-place restart count in ``RUN_RESTART_ENV``, so a
  restarted step can meet on a fresh rendezvous port instead of the one its dead predecessor held.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

COMPLETE_MARKER = ".complete"
CHECKPOINT_DIR_ENV = "MEGAHOUR_CHECKPOINT_DIR"
RUN_RESTART_ENV = "MEGAHOUR_RUN_RESTART"
# EX_TEMPFAIL in sysexits.h: "temporary failure, try again later". Not a signal's 128+N, so a step's
# exit status tells a rank that lost its peers apart from one the kernel killed.
PEER_LOST_EXIT = 75

_ATTEMPT_NAME = re.compile(r"attempt-([0-9]+)")


def next_attempt_index(existing_names: Iterable[str]) -> int:
    """One past the highest ``attempt-<k>`` among ``existing_names``; 0 for the first attempt.

    One sequence counts every attempt of the job, in-place restarts and Slurm requeues alike, so
    sorting the directories numerically replays the job's history.
    """
    indices = [int(m.group(1)) for name in existing_names if (m := _ATTEMPT_NAME.fullmatch(name))]
    return max(indices, default=-1) + 1


def attempt_dir_name(index: int) -> str:
    return f"attempt-{index}"
