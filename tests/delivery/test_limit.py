"""`megahour cache limit`: the node's own read limit reads every planned byte, from the files and the
cache volume, says why a figure is missing or withheld, and charges the CPU it took."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from megahour.cli import main
from megahour.curation.manifest import write_manifest
from megahour.delivery import cpu, limit
from megahour.delivery.client import CacheConfig, DeliveryError, Worker


def _files(tmp_path: Path, sizes: dict[str, int]) -> dict[str, list[tuple[int, int]]]:
    ranges = {}
    for key, size in sizes.items():
        path = tmp_path / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(size))
        ranges[key] = [(offset, min(4096, size - offset)) for offset in range(0, size, 4096)]
    return ranges


def test_the_file_reads_read_every_planned_byte_cold_then_warm(tmp_path) -> None:
    ranges = _files(tmp_path, {"bucket/a.mcap": 10_000, "bucket/b.mcap": 3 * 4096})
    result = limit.measure(tmp_path, ranges, None, 4096, parallel=3, min_seconds=0)
    assert (result.objects, result.page_ranges, result.bytes) == (2, 6, 10_000 + 3 * 4096)
    assert result.files_warm.bytes == result.bytes and result.files_warm.mb_per_s > 0
    assert result.files_cold.bytes == result.bytes
    assert result.volume_raw is None
    assert result.to_dict()["volume_raw"] is None


def test_each_read_is_repeated_until_it_has_run_long_enough_to_count_its_cpu(tmp_path) -> None:
    ranges = _files(tmp_path, {"bucket/a.mcap": 8192})
    volume = tmp_path / "nvme0"
    volume.mkdir()
    result = limit.measure(tmp_path, ranges, volume, 4096, parallel=2, min_seconds=0.05)
    for rate in (result.files_cold, result.files_warm, result.volume_raw):
        assert rate.seconds >= 0.05 and rate.passes >= 1
        assert rate.bytes == rate.passes * 8192
        assert f"; {rate.passes} passes" in rate.method


def test_a_cold_read_of_pages_that_stayed_cached_is_withheld(tmp_path, monkeypatch) -> None:
    ranges = _files(tmp_path, {"bucket/a.mcap": 8192})
    monkeypatch.setattr(limit, "cached_fraction", lambda path: 1.0)  # e.g. tmpfs, whose pages are the file
    cold = limit.measure(tmp_path, ranges, None, 4096, min_seconds=0).files_cold
    assert cold.withheld == "up to 100% of the probed bytes stayed in the page cache"
    assert cold.mb_per_s is None and cold.to_dict()["mb_per_s"] is None


def test_a_file_shorter_than_the_manifest_says_fails_rather_than_counting_less(tmp_path) -> None:
    ranges = _files(tmp_path, {"bucket/a.mcap": 5000})
    ranges["bucket/a.mcap"].append((8192, 4096))
    with pytest.raises(DeliveryError, match=r"a.mcap: read 0 of 4096 bytes at offset 8192"):
        limit.measure(tmp_path, ranges, None, 4096, min_seconds=0)


def test_a_missing_file_is_named(tmp_path) -> None:
    with pytest.raises(DeliveryError, match=r"bucket/gone.mcap: not a file on this node \(1 missing"):
        limit.measure(tmp_path, {"bucket/gone.mcap": [(0, 10)]}, None, 4096, min_seconds=0)


def test_the_files_are_skipped_with_the_reason_where_the_node_does_not_mount_the_bucket(tmp_path) -> None:
    config = CacheConfig(root_ufs="s3://lab-episodes/raw", workers=(Worker("gpu-1", "http://a:39999"),))
    assert limit.local_root(config) is None
    result = limit.measure(limit.local_root(config), {"lab/a.mcap": [(0, 10)]}, None, 4096, min_seconds=0)
    assert result.files_cold is None and "does not see the under-store as files" in result.files_skipped
    mounted = CacheConfig(root_ufs="s3://lab-episodes/raw", workers=(), local_root="file:///srv/lab")
    assert limit.local_root(mounted) == Path("/srv/lab")


def test_the_volume_read_reads_a_scratch_file_it_removes(tmp_path) -> None:
    volume = tmp_path / "nvme0"
    volume.mkdir()
    rate = limit.read_volume(volume, 10 * 65536 + 5, 65536, parallel=2)
    assert rate.bytes == 10 * 65536  # whole blocks: O_DIRECT reads aligned blocks
    assert rate.method.split(";")[0] in (
        "O_DIRECT",
        "buffered after eviction (the filesystem refuses O_DIRECT)",
    )
    assert list(volume.iterdir()) == []
    with pytest.raises(DeliveryError, match="not a directory here; pass --volume"):
        limit.read_volume(tmp_path / "absent", 65536, 65536, 1)


def test_the_rate_per_core_is_bytes_over_the_node_s_busy_seconds() -> None:
    before = cpu.CpuSample(wall=10.0, process_s=1.0, node_busy_s=100.0)
    after = cpu.CpuSample(wall=12.0, process_s=1.5, node_busy_s=103.0)
    busy = cpu.busy_between(before, after)
    rate = limit.ReadRate(300_000_000, after.wall - before.wall, after.process_s - before.process_s, busy)
    figures = rate.to_dict()
    assert (figures["mb_per_s"], figures["node_cores_busy"], figures["mb_per_s_per_core"]) == (
        150.0,
        1.5,
        100.0,
    )
    assert figures["cpu_s"] == 0.5
    assert cpu.busy_between(before, cpu.CpuSample(11.0, 1.0, None)) is None
    unknown = limit.ReadRate(1, 1.0, 0.0, None)
    assert unknown.node_cpu_busy_s is None and unknown.mb_per_s_per_core is None


def test_the_busy_time_comes_from_proc_stat() -> None:
    sample = cpu.cpu_sample()
    assert sample.node_busy_s is not None and sample.node_busy_s > 0
    assert cpu.busy_between(sample, cpu.cpu_sample()) >= 0


def test_the_cli_reads_what_the_manifest_s_samples_need(tmp_path, tuned_episodes, capsys) -> None:
    sizes = {}
    for key, data in tuned_episodes.items():
        (tmp_path / key).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / key).write_bytes(data)
        sizes[key] = len(data)
    table = pa.table(
        {
            "episode_id": [Path(key).stem for key in sizes],
            "storage_uri": [f"file://{tmp_path}/{key}" for key in sizes],
            "bytes": pa.array(list(sizes.values()), type=pa.uint64()),
        }
    )
    write_manifest(
        table, tmp_path / "m.arrow", world_size=1, query="test", warehouse="none", warehouse_version=""
    )
    config = {"root_ufs": str(tmp_path), "workers": [{"name": "gpu-1", "proxy_url": "http://gpu-1:39999"}]}
    config.update(page_size=16384, pages_per_range=1)
    (tmp_path / "cache.yml").write_text(yaml.safe_dump(config))
    (tmp_path / "nvme0").mkdir()
    argv = [
        "cache",
        "limit",
        "--manifest",
        str(tmp_path / "m.arrow"),
        "--spec",
        "vla",
        "--json",
        "--min-seconds",
        "0",
    ]
    assert main([*argv, "--config", str(tmp_path / "cache.yml"), "--volume", str(tmp_path / "nvme0")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["objects"] == 3 and report["page_ranges"] >= 3
    # The page ranges the vla spec's chunks and each episode's index touch (here nearly every range).
    assert 0 < report["bytes"] <= sum(sizes.values())
    assert report["files_warm"]["bytes"] == report["files_cold"]["bytes"] == report["bytes"]
    assert report["volume_raw"]["bytes"] == report["bytes"] // 16384 * 16384
