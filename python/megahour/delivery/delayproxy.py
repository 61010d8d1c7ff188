"""A TCP proxy that adds latency and occasional stalls: the "remote" in the local cluster's under-store.

The kernel here has no ``netem``, so ``tc`` can cap bandwidth (tbf/htb) but cannot delay packets. This
proxy sits in front of the local cluster's S3 server and delays every chunk it forwards by
``latency_ms`` in each direction, pipelined (a delayed chunk does not hold back the next one's clock, so
bandwidth is still what ``tc`` allows), and stalls all forwarding for ``stall_ms`` at random moments,
on average every ``stall_every_s`` seconds (a seeded Poisson process), as a congested cloud link does.

Standard library only: the understore role runs it with the system ``python3`` on the storage host.

    python3 delayproxy.py --listen 0.0.0.0:8082 --upstream 127.0.0.1:8081 --latency-ms 20 \\
        --stall-every-s 30 --stall-ms 400
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import random
import signal
import sys
import time
from dataclasses import dataclass

log = logging.getLogger("megahour.delayproxy")
CHUNK = 64 * 1024
QUEUE_CHUNKS = 16  # at most 1 MB read ahead per direction


@dataclass(frozen=True)
class LinkProfile:
    latency_ms: float = 0.0
    stall_every_s: float = 0.0  # mean time between stalls; 0: never
    stall_ms: float = 0.0

    def __post_init__(self) -> None:
        if self.latency_ms < 0 or self.stall_every_s < 0 or self.stall_ms < 0:
            raise ValueError(f"{self}: latency, stall interval and stall length must not be negative")


class StallSchedule:
    """Stall windows [start, start + length) of a seeded Poisson process, generated on demand."""

    def __init__(self, profile: LinkProfile, seed: int = 0, start: float = 0.0) -> None:
        self.profile = profile
        self._rng = random.Random(seed)
        self._windows: list[tuple[float, float]] = []
        self._next = start + self._gap()

    def _gap(self) -> float:
        if self.profile.stall_every_s <= 0 or self.profile.stall_ms <= 0:
            return float("inf")
        return self._rng.expovariate(1.0 / self.profile.stall_every_s)

    def release_time(self, t: float) -> float:
        """When data ready at ``t`` may go: ``t`` itself, or the end of the stall window covering it."""
        while self._next <= t:
            begin = self._next
            self._windows.append((begin, begin + self.profile.stall_ms / 1000.0))
            self._next = begin + self.profile.stall_ms / 1000.0 + self._gap()
        # Connections ask with times slightly out of order, so recent windows are kept, not only those
        # that can cover a later t.
        del self._windows[:-64]
        for begin, end in self._windows:
            if begin <= t < end:
                return end
        return t


async def _pump(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    profile: LinkProfile,
    stalls: StallSchedule,
    broken: asyncio.Event,
    clock=time.monotonic,
) -> None:
    """Forward reader -> writer, each chunk released ``latency`` after it arrived (and after stalls).

    The queue is bounded, so a fast upstream is read only a few chunks ahead of what the (rate-capped)
    link delivers, and a stall holds back what is queued too: release is decided when a chunk leaves.
    """
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(maxsize=QUEUE_CHUNKS)

    async def receive() -> None:
        try:
            while data := await reader.read(CHUNK):
                await queue.put((clock() + profile.latency_ms / 1000.0, data))
        except (ConnectionError, OSError) as exc:  # a reset: the whole connection goes
            log.debug("read side reset: %s", exc)
            broken.set()
        finally:
            await queue.put((clock() + profile.latency_ms / 1000.0, b""))

    receiver = asyncio.create_task(receive())
    try:
        while True:
            due, data = await queue.get()
            release = stalls.release_time(max(due, clock()))
            wait = release - clock()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                break
            writer.write(data)
            await writer.drain()
        with contextlib.suppress(OSError):
            if writer.can_write_eof():
                writer.write_eof()
    finally:
        receiver.cancel()
        with contextlib.suppress(asyncio.CancelledError, OSError, ConnectionError):
            await receiver


class DelayProxy:
    def __init__(self, upstream: tuple[str, int], profile: LinkProfile, seed: int = 0) -> None:
        self.upstream = upstream
        self.profile = profile
        self.stalls = StallSchedule(profile, seed, start=time.monotonic())  # one link: shared by connections
        self.connections = 0

    async def handle(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError as exc:
            log.warning("upstream %s:%d refused: %s", *self.upstream, exc)
            client_writer.close()
            return
        broken = asyncio.Event()
        pumps = {
            asyncio.create_task(_pump(client_reader, up_writer, self.profile, self.stalls, broken)),
            asyncio.create_task(_pump(up_reader, client_writer, self.profile, self.stalls, broken)),
        }
        watch = asyncio.create_task(broken.wait())
        try:
            # A direction that ends with EOF leaves the other one running (a half-close); a reset or a
            # failed write ends the connection, since the other side would wait on a peer that is gone.
            pending = set(pumps)
            while pending:
                done, pending = await asyncio.wait(pending | {watch}, return_when=asyncio.FIRST_COMPLETED)
                pending.discard(watch)
                failed = [t for t in done if t is not watch and t.exception() is not None]
                if watch in done or failed:
                    log.debug("connection reset: %s", failed[0].exception() if failed else "read side")
                    for w in (client_writer, up_writer):
                        w.transport.abort()
                    break
        finally:
            watch.cancel()
            for task in pumps:
                task.cancel()
            await asyncio.gather(watch, *pumps, return_exceptions=True)
            for w in (client_writer, up_writer):
                w.close()
                with contextlib.suppress(ConnectionError, OSError):
                    await w.wait_closed()

    async def serve(self, host: str, port: int) -> asyncio.base_events.Server:
        return await asyncio.start_server(self.handle, host, port, reuse_address=True)


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: expected HOST:PORT")
    return host, int(port)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--listen", type=_address, required=True, help="HOST:PORT to accept clients on")
    parser.add_argument("--upstream", type=_address, required=True, help="HOST:PORT of the real server")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="added one-way delay per chunk")
    parser.add_argument("--stall-every-s", type=float, default=0.0, help="mean seconds between stalls")
    parser.add_argument("--stall-ms", type=float, default=0.0, help="length of each stall")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s", stream=sys.stderr)
    profile = LinkProfile(args.latency_ms, args.stall_every_s, args.stall_ms)
    proxy = DelayProxy(args.upstream, profile, args.seed)

    async def run() -> None:
        server = await proxy.serve(*args.listen)
        log.info("delaying %s:%d -> %s:%d with %s", *args.listen, *args.upstream, profile)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        async with server:
            await stop.wait()

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
