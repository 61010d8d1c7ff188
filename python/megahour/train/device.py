"""The runtime a rank trains on: its device, process group, device mesh, autocast and determinism, and
the peak FLOP rate that MFU is measured against.

:func:`init_runtime` picks CUDA and NCCL when a GPU is there (and ``device`` allows), else the CPU and
gloo; it joins the process group (only when the world has more than one rank and nobody joined it yet)
and builds a 2-D :class:`~torch.distributed.device_mesh.DeviceMesh` named ``("inter", "intra")``:
nodes x ranks per node, in torchrun's node-major rank order (``topology``). ``mesh["intra"]`` is a
rank's node, ``mesh["inter"]`` the ranks with its local rank on every node.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.distributed as dist

from megahour.train.topology import Topology

log = logging.getLogger(__name__)

DEVICES = ("auto", "cpu", "cuda")
MESH_DIMS = ("inter", "intra")
PEAK_FLOPS_ENV = "MEGAHOUR_PEAK_FLOPS"
# cuBLAS picks among reduction orders per call unless its workspace is pinned; ":4096:8" is the
# setting NVIDIA documents for reproducible results (cuBLAS "Results reproducibility").
CUBLAS_WORKSPACE = ":4096:8"

# Dense (no 2:4 sparsity) BF16 tensor-core peaks, FLOP/s, from the vendor datasheets: the figure MFU
# is conventionally quoted against. Sparse figures are twice these. Order matters: the first substring
# of the device name that matches wins, so the specific variants come before the family.
#   H100 SXM / H200: NVIDIA H100 and H200 Tensor Core GPU datasheets, BF16 1,979 TFLOPS with sparsity.
#   H100 PCIe: 1,513 with sparsity; H100 NVL: 1,671 with sparsity (H100 datasheet).
#   A100 (SXM and PCIe): NVIDIA A100 datasheet, BF16 312 TFLOPS dense.
#   L40S: NVIDIA L40S datasheet, BF16 362.05 TFLOPS dense (733 with sparsity).
#   B200: NVIDIA HGX B200 datasheet, FP16/BF16 36 PFLOPS with sparsity for 8 GPUs: 2.25 PF dense each.
PEAK_BF16_FLOPS: tuple[tuple[str, float], ...] = (
    ("H100 PCIE", 756e12),
    ("H100 NVL", 835e12),
    ("H100", 989e12),
    ("GH200", 989e12),
    ("H200", 989e12),
    ("A100", 312e12),
    ("L40S", 362e12),
    ("B200", 2250e12),
)


class RuntimeSetupError(RuntimeError):
    """The requested device or world cannot be set up here; the message names the fix."""


@dataclass(frozen=True)
class Runtime:
    device: torch.device
    backend: str  # "nccl" | "gloo"
    rank: int
    local_rank: int
    topology: Topology
    mesh: Any  # DeviceMesh with dims MESH_DIMS, or None for one rank
    autocast_dtype: torch.dtype | None  # bfloat16 on CUDA, None (fp32) on the CPU
    created_group: bool  # this runtime joined the process group, so close() leaves it
    deterministic: bool = False  # torch's deterministic kernels were on when init_runtime returned

    @property
    def world_size(self) -> int:
        return self.topology.world_size

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """bf16 autocast on a GPU; nothing on the CPU, where fp32 keeps the kill/resume runs bit-exact."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    def synchronize(self) -> None:
        """Wait for the GPU's queued kernels (a no-op on the CPU): before reading a clock that must see
        the work, not its launch."""
        if self.is_cuda:
            torch.cuda.synchronize(self.device)

    def close(self) -> None:
        """Leave the process group if this runtime joined it: every rank first, together.

        The barrier matters: a rank exiting while a peer's gloo threads still hold its connections
        makes the peer abort, and torchrun then reports a finished job as failed.
        """
        if self.created_group and dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()


def _choose_device(device: str, local_rank: int) -> torch.device:
    if device not in DEVICES:
        raise ValueError(f"device {device!r} is not one of {', '.join(DEVICES)}")
    if device == "cpu" or (device == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RuntimeSetupError(
            "device 'cuda' was asked for but torch sees no GPU; pass --device cpu or auto"
        )
    count = torch.cuda.device_count()
    if local_rank >= count:
        raise RuntimeSetupError(
            f"local rank {local_rank} has no GPU (this node has {count}); launch at most {count} ranks a "
            "node (torchrun --nproc-per-node)"
        )
    return torch.device("cuda", local_rank)


def _join_group(backend: str, env: Mapping[str, str], topology: Topology) -> bool:
    """Join the default process group if the world has several ranks and nobody joined it; True if we did."""
    if topology.world_size == 1 or dist.is_initialized():
        return False
    missing = [k for k in ("RANK", "MASTER_ADDR", "MASTER_PORT") if k not in env]
    if missing:
        raise RuntimeSetupError(
            f"WORLD_SIZE={topology.world_size} but {', '.join(missing)} is not set; launch with torchrun"
        )
    # env://: under torchrun the agent already serves the rendezvous store on MASTER_PORT, and env://
    # uses it; a tcp:// init would try to bind that port a second time.
    dist.init_process_group(backend, rank=int(env["RANK"]), world_size=topology.world_size)
    return True


def _mesh(device: torch.device, topology: Topology) -> Any:
    if topology.world_size == 1:
        return None
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(device.type, (topology.nodes, topology.gpus_per_node), mesh_dim_names=MESH_DIMS)


def init_runtime(
    env: Mapping[str, str] | None = None,
    device: str = "auto",
    deterministic: bool | None = None,
    threads: int = 1,
) -> Runtime:
    """Set up this rank: device, process group, mesh; deterministic mode if asked.

    ``deterministic``: True runs :func:`configure_determinism` with ``threads`` (on a GPU that pins the
    cuBLAS workspace before anything can touch cuBLAS); False turns deterministic kernels off; None
    leaves torch's setting as it is, for a caller that configures it itself.
    """
    env = os.environ if env is None else env
    topology = Topology.from_env(env)
    local_rank = int(env.get("LOCAL_RANK", "0"))
    chosen = _choose_device(device, local_rank)
    if deterministic and chosen.type == "cuda":
        _pin_cublas_workspace()  # before set_device and the first matmul create the cuBLAS handle
    if chosen.type == "cuda":
        torch.cuda.set_device(chosen)
    backend = "nccl" if chosen.type == "cuda" else "gloo"
    created = _join_group(backend, env, topology)
    if dist.is_initialized():
        backend = str(dist.get_backend())  # a group someone else made (tests: gloo) is what we talk over
    rank = dist.get_rank() if dist.is_initialized() else int(env.get("RANK", "0"))
    runtime = Runtime(
        device=chosen,
        backend=backend,
        rank=rank,
        local_rank=local_rank,
        topology=topology,
        mesh=_mesh(chosen, topology),
        autocast_dtype=torch.bfloat16 if chosen.type == "cuda" else None,
        created_group=created,
    )
    if deterministic:
        configure_determinism(runtime, threads)
    elif deterministic is False:
        torch.use_deterministic_algorithms(False)
    return replace(runtime, deterministic=torch.are_deterministic_algorithms_enabled())


def _pin_cublas_workspace() -> None:
    """cuBLAS reads CUBLAS_WORKSPACE_CONFIG when it creates its handle, at the first matmul on a device;
    set later, it is silently ignored and torch's deterministic mode then raises on the first matmul."""
    if os.environ.get("CUBLAS_WORKSPACE_CONFIG"):
        return  # the launcher's choice (":16:8" is the other documented value)
    if torch.cuda.is_initialized():
        log.warning(
            "CUDA was initialised before CUBLAS_WORKSPACE_CONFIG was set; if cuBLAS already ran, set "
            "CUBLAS_WORKSPACE_CONFIG=%s in the launcher's environment",
            CUBLAS_WORKSPACE,
        )
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_WORKSPACE


def configure_determinism(runtime: Runtime, threads: int = 1) -> None:
    """Deterministic kernels, and on the CPU a fixed intra-op thread count.

    The thread count is part of the arithmetic on the CPU: a reduction split over a different number of
    threads sums in a different order, so a resumed run on another thread count would drift.
    """
    if threads < 1:
        raise ValueError(f"threads must be at least 1, got {threads}")
    if runtime.is_cuda:
        _pin_cublas_workspace()
        torch.backends.cudnn.benchmark = False  # autotuning may pick a different kernel per run
    torch.use_deterministic_algorithms(True)
    if not runtime.is_cuda:
        torch.set_num_threads(threads)


def peak_flops_for_name(name: str) -> float | None:
    """The dense BF16 peak of a GPU by its CUDA device name, or None when the name is unknown."""
    upper = name.upper()
    for key, flops in PEAK_BF16_FLOPS:
        if key in upper:
            return flops
    return None


def peak_flops(device: torch.device | str, env: Mapping[str, str] | None = None) -> float | None:
    """Peak FLOP/s to measure MFU against: ``MEGAHOUR_PEAK_FLOPS`` if set, else the GPU's dense BF16
    figure, else None (the CPU, an unknown GPU: MFU is then not reported rather than guessed)."""
    env = os.environ if env is None else env
    override = env.get(PEAK_FLOPS_ENV, "").strip()
    if override:
        try:
            value = float(override)
        except ValueError:
            value = -1.0
        if not value > 0:
            raise ValueError(f"{PEAK_FLOPS_ENV}={override!r} is not a positive number (FLOP/s, e.g. 989e12)")
        return value
    device = torch.device(device)
    if device.type != "cuda":
        return None
    return peak_flops_for_name(torch.cuda.get_device_name(device))


def mfu(flops_per_sample: float, samples_per_second_per_rank: float, peak: float | None) -> float | None:
    """Model FLOPs utilisation of one rank: achieved model FLOP/s over the peak; None without a peak."""
    if peak is None or peak <= 0:
        return None
    return flops_per_sample * samples_per_second_per_rank / peak


@contextlib.contextmanager
def runtime_scope(*args: Any, **kwargs: Any) -> Iterator[Runtime]:
    """``init_runtime`` that always closes: ``with runtime_scope(env) as rt: ...``."""
    runtime = init_runtime(*args, **kwargs)
    try:
        yield runtime
    finally:
        runtime.close()
