from __future__ import annotations

import asyncio
import os
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from megahour.delivery.delayproxy import DelayProxy, LinkProfile, StallSchedule


def test_no_stalls_releases_at_once() -> None:
    schedule = StallSchedule(LinkProfile(latency_ms=5))
    assert [schedule.release_time(t) for t in (0.0, 1.0, 1e6)] == [0.0, 1.0, 1e6]


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 1000), times=st.lists(st.floats(0, 600), min_size=1, max_size=50))
def test_stalls_only_ever_delay_to_a_window_end(seed: int, times: list[float]) -> None:
    profile = LinkProfile(stall_every_s=5.0, stall_ms=300.0)
    schedule = StallSchedule(profile, seed)
    for t in sorted(times):
        released = schedule.release_time(t)
        assert t <= released <= t + 0.3 + 1e-9


def test_stalls_come_about_as_often_as_asked() -> None:
    profile = LinkProfile(stall_every_s=2.0, stall_ms=100.0)
    schedule = StallSchedule(profile, seed=7)
    step = 0.01
    stalled = sum(schedule.release_time(i * step) > i * step for i in range(int(2000 / step)))
    # 2000 s, a stall every ~2.1 s of 0.1 s: about 4.8% of the time stalled.
    assert 0.035 < stalled * step / 2000 < 0.06


def test_negative_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="must not be negative"):
        LinkProfile(latency_ms=-1)


async def _round_trip(profile: LinkProfile, payload: bytes) -> tuple[bytes, float]:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.close()

    upstream = await asyncio.start_server(echo, "127.0.0.1", 0)
    up_port = upstream.sockets[0].getsockname()[1]
    proxy = DelayProxy(("127.0.0.1", up_port), profile)
    server = await proxy.serve("127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    began = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(payload)
    await writer.drain()
    writer.write_eof()
    received = await reader.read(-1)
    elapsed = time.perf_counter() - began
    writer.close()
    server.close()
    upstream.close()
    return received, elapsed


def test_the_proxy_forwards_every_byte_and_adds_the_latency_both_ways() -> None:
    payload = os.urandom(3 * 1024 * 1024 + 17)
    received, elapsed = asyncio.run(_round_trip(LinkProfile(latency_ms=100), payload))
    assert received == payload
    assert elapsed >= 0.2  # 100 ms there and 100 ms back
    plain, fast = asyncio.run(_round_trip(LinkProfile(), payload))
    assert plain == payload and fast < elapsed
