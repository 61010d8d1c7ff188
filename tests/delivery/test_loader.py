from __future__ import annotations

import pytest

from megahour.delivery.client import CacheClient, DeliveryError
from megahour.delivery.loader import CacheLoader, SampleRef
from megahour.delivery.warm import plan, warm
from megahour.episodes.layout import SAMPLE_SPECS
from tests.delivery.conftest import FakeClock, MemoryTransport, make_config

SPEC = SAMPLE_SPECS["vla"]


def refs_of(objects: dict[str, bytes], repeat: int = 2) -> list[SampleRef]:
    keys = sorted(objects)
    return [
        SampleRef(i, f"ep{i % len(keys)}", keys[i % len(keys)], len(objects[keys[i % len(keys)]]))
        for i in range(len(keys) * repeat)
    ]


def run(objects, refs, down_after=None, epoch=0, **loader_kw):
    transport = MemoryTransport(objects)
    client = CacheClient(make_config(workers=3, page_size=16384), transport, clock=FakeClock())
    delivered = []
    with CacheLoader(client, SPEC, sleep=lambda s: None, **loader_kw) as loader:
        for n, item in enumerate(loader.samples(refs, epoch)):
            delivered.append(item)
            if down_after is not None and n == down_after:
                transport.down.add("gpu-2")
    return delivered, client, transport


def test_every_row_once_and_the_same_bytes_when_a_worker_dies_mid_epoch(tuned_episodes) -> None:
    refs = refs_of(tuned_episodes)
    healthy, _, _ = run(tuned_episodes, refs)
    faulty, client, transport = run(tuned_episodes, refs, down_after=1)

    assert [d.index for d in faulty] == [r.index for r in refs]
    assert [(d.t_ns, d.digest) for d in faulty] == [(d.t_ns, d.digest) for d in healthy]
    assert client.stats.fallbacks >= 1
    assert not any(name == "gpu-2" for name, *_ in transport.calls[-5:])


def test_samples_move_with_the_epoch_and_stay_inside_the_episode(tuned_episodes) -> None:
    refs = refs_of(tuned_episodes, repeat=1)
    first, _, _ = run(tuned_episodes, refs, epoch=0)
    again, _, _ = run(tuned_episodes, refs, epoch=0)
    second, _, _ = run(tuned_episodes, refs, epoch=1)
    assert [d.t_ns for d in first] == [d.t_ns for d in again]
    assert [d.t_ns for d in first] != [d.t_ns for d in second]
    assert all(d.sample.frames for d in first)


def test_a_failing_read_is_retried_whole_and_never_skipped(tuned_episodes) -> None:
    refs = refs_of(tuned_episodes, repeat=1)
    transport = MemoryTransport(tuned_episodes)
    client = CacheClient(make_config(workers=1, page_size=16384), transport, clock=FakeClock())
    transport.down.add("gpu-1")
    transport.under_store_fails = 2
    with CacheLoader(client, SPEC, sleep=lambda s: None, attempts=3) as loader:
        out = list(loader.samples(refs, 0))
    assert [d.index for d in out] == [0, 1, 2]
    assert out[0].attempts == 3

    transport.under_store_fails = 10
    failed = pytest.raises(DeliveryError, match=r"row 0 \(ep0, storage/ep-0.mcap\) failed 2 times")
    with CacheLoader(client, SPEC, sleep=lambda s: None, attempts=2) as loader, failed:
        list(loader.samples(refs, 0))


def test_a_row_twice_in_one_epoch_is_refused(tuned_episodes) -> None:
    refs = refs_of(tuned_episodes, repeat=1)
    with pytest.raises(DeliveryError, match="row 0 appears twice"):
        run(tuned_episodes, [refs[0], refs[0]])


def test_warm_loads_exactly_the_planned_page_ranges_and_then_reads_hit_them(tuned_episodes) -> None:
    transport = MemoryTransport(tuned_episodes)
    client = CacheClient(make_config(workers=3, page_size=16384), transport, clock=FakeClock())
    refs = refs_of(tuned_episodes)
    warm_plan = plan(client, refs, SPEC)
    assert set(warm_plan.ranges) == set(tuned_episodes)
    transport.calls.clear()
    result = warm(client, warm_plan)
    assert result.page_ranges == warm_plan.page_range_count == len(transport.calls)
    assert result.bytes == warm_plan.bytes(client.config.geometry)
    warmed = {(key, offset // 16384) for _, key, offset, _ in transport.calls}

    transport.calls.clear()
    with CacheLoader(client, SPEC, sleep=lambda s: None) as loader:
        for epoch in range(3):
            list(loader.samples(refs, epoch))
    read = {(key, offset // 16384) for _, key, offset, _ in transport.calls}
    assert read <= warmed


def test_parallel_warm_reads_the_same_ranges(tuned_episodes) -> None:
    transport = MemoryTransport(tuned_episodes)
    client = CacheClient(make_config(workers=3, page_size=16384), transport, clock=FakeClock())
    warm_plan = plan(client, refs_of(tuned_episodes), SPEC)
    transport.calls.clear()
    serial = warm(client, warm_plan)
    serial_calls = sorted(transport.calls, key=str)
    transport.calls.clear()
    parallel = warm(client, warm_plan, parallel=4)
    assert sorted(transport.calls, key=str) == serial_calls
    assert (parallel.bytes, parallel.page_ranges) == (serial.bytes, serial.page_ranges)


def test_parallel_workers_deliver_the_same_rows_in_the_same_order(tuned_episodes) -> None:
    refs = refs_of(tuned_episodes, repeat=3)
    serial, _, _ = run(tuned_episodes, refs)
    parallel, _, _ = run(tuned_episodes, refs, workers=3)
    faulty, client, _ = run(tuned_episodes, refs, down_after=2, workers=3)
    expected = [(d.index, d.t_ns, d.digest) for d in serial]
    assert [(d.index, d.t_ns, d.digest) for d in parallel] == expected
    assert [(d.index, d.t_ns, d.digest) for d in faulty] == expected
    assert client.stats.fallbacks >= 1


def test_a_warm_that_no_worker_served_says_it_cached_nothing(tuned_episodes) -> None:
    """Found by molecule: workers that could not read the under-store (permission denied) made every warm
    read fall back, and the warm still reported success. Now the result says it cached nothing."""
    transport = MemoryTransport(tuned_episodes)
    client = CacheClient(make_config(workers=2, page_size=16384), transport, clock=FakeClock())
    warm_plan = plan(client, refs_of(tuned_episodes), SPEC)
    healthy = warm(client, warm_plan)
    assert healthy.worker_bytes == healthy.bytes > 0 and not healthy.cached_nothing
    transport.down = {"gpu-1"}
    partly = warm(client, warm_plan)
    assert 0 < partly.worker_bytes < partly.bytes and partly.fallbacks > 0 and not partly.cached_nothing
    transport.down = {"gpu-1", "gpu-2"}
    none = warm(CacheClient(client.config, transport, clock=FakeClock()), warm_plan)
    assert none.worker_bytes == 0 and none.bytes == healthy.bytes and none.cached_nothing
    assert none.to_dict()["worker_bytes"] == 0


def test_simulated_steps_report_the_total_and_the_longest_single_wait(monkeypatch):
    import megahour.delivery.loader as loader_module

    clock = [0.0]
    delays = iter([0.5, 3.0, 0.25])

    def items():
        for i in range(3):
            clock[0] += next(delays)  # the time the step waited for this item
            yield i

    monkeypatch.setattr(loader_module.time, "perf_counter", lambda: clock[0])
    report = loader_module.simulate_steps(items(), 1.0, sleep=lambda s: clock.__setitem__(0, clock[0] + s))
    assert report.steps == 3
    assert report.wait_s == 3.75 and report.max_wait_s == 3.0
    assert report.to_dict()["max_wait_s"] == 3.0 and report.total_s == 6.75
