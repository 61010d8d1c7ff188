"""The runtime: device choice, process group and mesh, determinism, peak FLOPs and MFU."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist

from megahour.train.device import (
    MESH_DIMS,
    PEAK_FLOPS_ENV,
    RuntimeSetupError,
    init_runtime,
    mfu,
    peak_flops,
    peak_flops_for_name,
)
from megahour.train.spawn import free_port, run_local_world
from megahour.train.topology import Topology


@pytest.fixture
def restore_torch_globals():
    deterministic, threads = torch.are_deterministic_algorithms_enabled(), torch.get_num_threads()
    yield
    torch.use_deterministic_algorithms(deterministic)
    torch.set_num_threads(threads)


def test_one_rank_on_the_cpu(restore_torch_globals) -> None:
    runtime = init_runtime({"WORLD_SIZE": "1"}, device="cpu", deterministic=True, threads=1)
    assert runtime.device == torch.device("cpu")
    assert (runtime.backend, runtime.rank, runtime.local_rank) == ("gloo", 0, 0)
    assert runtime.topology == Topology(1, 1)
    assert runtime.mesh is None and runtime.autocast_dtype is None and not runtime.created_group
    assert runtime.deterministic
    assert torch.are_deterministic_algorithms_enabled() and torch.get_num_threads() == 1
    with runtime.autocast():
        assert torch.ones(2, 2).matmul(torch.ones(2, 2)).dtype == torch.float32
    runtime.close()  # nothing was joined: a no-op


def test_determinism_is_left_alone_unless_asked(restore_torch_globals) -> None:
    torch.use_deterministic_algorithms(True)
    assert init_runtime({}, device="cpu").deterministic  # None: the caller's setting stays
    runtime = init_runtime({}, device="auto", deterministic=False)
    assert not runtime.deterministic and not torch.are_deterministic_algorithms_enabled()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_asking_for_cuda_without_a_gpu_names_the_fix() -> None:
    with pytest.raises(RuntimeSetupError, match="pass --device cpu"):
        init_runtime({}, device="cuda")
    assert init_runtime({}, device="auto", deterministic=False).device.type == "cpu"


def test_an_unknown_device_is_refused() -> None:
    with pytest.raises(ValueError, match="auto, cpu, cuda"):
        init_runtime({}, device="tpu")


def test_a_world_without_a_rendezvous_says_to_use_torchrun() -> None:
    assert not dist.is_initialized()
    with pytest.raises(RuntimeSetupError, match="MASTER_ADDR, MASTER_PORT is not set; launch with torchrun"):
        init_runtime({"WORLD_SIZE": "2", "RANK": "0"}, device="cpu", deterministic=False)


@pytest.mark.parametrize(
    ("name", "peak"),
    [
        ("NVIDIA H100 80GB HBM3", 989e12),
        ("NVIDIA H100 PCIe", 756e12),
        ("NVIDIA H100 NVL", 835e12),
        ("NVIDIA H200", 989e12),
        ("NVIDIA GH200 480GB", 989e12),
        ("NVIDIA A100-SXM4-80GB", 312e12),
        ("NVIDIA L40S", 362e12),
        ("NVIDIA B200", 2250e12),
        ("Tesla T4", None),
    ],
)
def test_peak_flops_by_gpu_name(name, peak) -> None:
    assert peak_flops_for_name(name) == peak


def test_peak_flops_on_the_cpu_is_unknown_unless_overridden() -> None:
    assert peak_flops("cpu", env={}) is None
    assert peak_flops("cpu", env={PEAK_FLOPS_ENV: "1.5e12"}) == 1.5e12
    for bad in ("fast", "0", "-3"):
        with pytest.raises(ValueError, match="positive number"):
            peak_flops("cpu", env={PEAK_FLOPS_ENV: bad})


def test_mfu() -> None:
    assert mfu(1e9, 100.0, 1e12) == pytest.approx(0.1)
    assert mfu(1e9, 100.0, None) is None


def mesh_worker(rank: int, topology: Topology) -> dict:
    """On a 2x2 gloo world: the mesh over the group the spawner made, then over one init_runtime makes."""
    joined = init_runtime(os.environ, device="cpu", deterministic=False)
    report = {
        "rank": joined.rank,
        "created_before": joined.created_group,
        "dims": joined.mesh.mesh_dim_names,
        "intra": dist.get_process_group_ranks(joined.mesh.get_group("intra")),
        "inter": dist.get_process_group_ranks(joined.mesh.get_group("inter")),
    }
    # The torchrun path: no group yet, so init_runtime joins one (env://) and close() leaves it. Rank 0
    # picks the ports for it and for the group the spawner expects back.
    ports = [free_port(), free_port()] if rank == 0 else [0, 0]
    dist.broadcast_object_list(ports, src=0)
    dist.destroy_process_group()
    os.environ["MASTER_PORT"] = str(ports[0])
    created = init_runtime(os.environ, device="cpu", deterministic=False)
    total = torch.tensor([float(rank)])
    dist.all_reduce(total, group=created.mesh.get_group("intra"))
    report |= {"created": created.created_group, "backend": created.backend, "node_sum": total.item()}
    created.close()
    report["closed"] = not dist.is_initialized()
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{ports[1]}", rank=rank, world_size=topology.world_size
    )
    return report


def test_a_2x2_world_gets_an_inter_intra_mesh() -> None:
    topology = Topology(2, 2)
    reports = run_local_world(topology, mesh_worker, timeout_s=120)
    for rank, r in enumerate(reports):
        node = topology.node_of(rank)
        assert r["rank"] == rank and r["dims"] == MESH_DIMS
        assert not r["created_before"]  # the spawner's group was used, and is the spawner's to close
        assert r["intra"] == topology.node_ranks(node)
        assert r["inter"] == [n * 2 + topology.local_rank(rank) for n in range(2)]
        assert r["created"] and r["closed"] and r["backend"] == "gloo"
        assert r["node_sum"] == sum(topology.node_ranks(node))
