"""Which failures of a rank mean "a peer died", so the rank exits for a restart instead of as a bug.

When one rank of a job dies (the OOM killer, a GPU falling off the bus, a killed process), every other
rank fails in its next collective: gloo reports the closed connection, NCCL aborts the communicator,
the TCP store loses its server. None of that is the surviving rank's fault, and `megahour run` must
restart the whole step; a plain exception (exit 1) would read as an application error instead.
"""

from __future__ import annotations

# What gloo's TCP transport says when the other end of a pair went away (torch 2.13 raises these as a
# plain RuntimeError from third_party/gloo/gloo/transport/tcp/pair.cc).
_GLOO_PEER_GONE = (
    "Connection closed by peer",
    "Connection reset by peer",
    "Broken pipe",
)


def is_peer_lost(exc: BaseException) -> bool:
    """True when ``exc`` (or what it was raised from) is a collective or store failing because a peer died."""
    import torch.distributed as dist

    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        # DistBackendError (NCCL's aborted communicator), DistNetworkError, DistStoreError.
        if isinstance(current, dist.DistError):
            return True
        if isinstance(current, RuntimeError) and any(text in str(current) for text in _GLOO_PEER_GONE):
            return True
        current = current.__cause__ or current.__context__
    return False
