#!/usr/bin/env python3
"""Cache master failover: how long reads through the cache stop when the Alluxio master dies.

Two set-ups of real Alluxio 2.9 daemons on this machine, in one run, each with one paged-store worker and one
S3 proxy over a directory of objects, and a reader that keeps fetching page ranges through the proxy and
checks every byte against the file:

- baseline: one master (what megahour deploys without an ``alluxio_master`` group), killed with SIGKILL and
  started again 5 s later, as systemd's ``RestartSec=5`` does;
- ours: three masters with the embedded (Raft) journal and the settings roles/alluxio gives them (its
  ``alluxio_ha_site`` filter, read from the role: election timeouts of 3-6 s), the leader killed with SIGKILL
  and left down;
- without --quick also three masters with Alluxio's own election timeouts (10-20 s), the reason for the
  role's.

For each: the reads' longest stall around the kill (what a training job's loader sees as data wait, or as
under-store fallbacks once its timeout passes), the reads that failed, the time until a master serves again
(the new leader, or the restarted one), and the reads whose bytes differed (must be 0: the run fails
otherwise). The leader is found the way `megahour cache status` finds it: the first master whose web port
answers (standby masters serve none).

It needs the Alluxio distribution the alluxio role builds on the control node (``.cache/alluxio/``, made by
any deploy: ``make up`` or a molecule run) and a JDK 17 (``java`` on PATH, or ``--java``).

    python benchmarks/cache_failover.py --quick --json benchmarks/results/cache-failover-quick.json
    python benchmarks/cache_failover.py --json benchmarks/results/cache-failover.json

Not the cluster: every daemon is on 127.0.0.1 of one host, so the figures hold Alluxio's own election and
client retry times, not a network's. molecule's cluster scenario has not run three masters yet (issue 26).
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import git_commit, write_json

console = Console(stderr=True)
REPO = Path(__file__).resolve().parent.parent
VERSION = "2.9.6"
RESTART_DELAY_S = 5.0  # roles/alluxio's units: Restart=on-failure, RestartSec=5
PAGE = 1 << 20
BUCKET = "bench"


def role_ha_settings() -> dict[str, str]:
    """What roles/alluxio sets for three masters besides their addresses (its ``alluxio_ha_site`` filter):
    the benchmark measures the role's settings, not a copy of them."""
    spec = importlib.util.spec_from_file_location(
        "alluxio_filters", REPO / "roles/alluxio/filter_plugins/alluxio_filters.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    site = module.alluxio_ha_site(["m0", "m1", "m2"], {"master_raft": 1, "master_rpc": 2})
    return {key: value for key, value in site.items() if not key.endswith(".addresses")}


def free_ports(count: int) -> list[int]:
    """``count`` TCP ports free on 127.0.0.1 now (the kernel's picks, released before use)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def find_distribution(given: Path | None) -> Path:
    if given is not None:
        return given
    found = sorted((REPO / ".cache" / "alluxio").glob(f"alluxio-{VERSION}-maven-*.tar"))
    if not found:
        raise SystemExit(
            f"no Alluxio {VERSION} distribution in {REPO / '.cache/alluxio'}: the alluxio role builds it on "
            "the control node during a deploy (`make up`, or any molecule run); or pass --dist TAR_OR_DIR"
        )
    return found[-1]


def unpack(dist: Path, into: Path) -> Path:
    """The distribution's directory (its ``lib/``): ``dist`` itself, or the tar unpacked into ``into``."""
    if dist.is_dir():
        return dist
    target = into / "dist"
    with tarfile.open(dist) as tar:
        tar.extractall(target, filter="data")
    return target


@dataclass
class Daemon:
    name: str
    kind: str  # master, worker or proxy
    properties: dict[str, str]
    process: subprocess.Popen | None = None
    log: Path | None = None


@dataclass
class Tier:
    """Alluxio daemons on 127.0.0.1: ``masters`` masters, one worker, one proxy."""

    root: Path
    dist: Path
    java: str
    masters: int
    role_ha: bool = True  # three masters: roles/alluxio's HA settings; False: Alluxio's own defaults
    daemons: dict[str, Daemon] = field(default_factory=dict)
    web_ports: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        ports = free_ports(3 * self.masters + 3)
        master_rpc = ports[0 : self.masters]
        master_web = ports[self.masters : 2 * self.masters]
        master_raft = ports[2 * self.masters : 3 * self.masters]
        worker_rpc, worker_web, proxy_web = ports[3 * self.masters :]
        self.ufs = self.root / "ufs"
        self.conf = self.root / "conf"
        self.conf.mkdir(parents=True)
        site = {
            "alluxio.master.journal.type": "EMBEDDED",
            "alluxio.master.metastore": "ROCKS",
            "alluxio.master.mount.table.root.ufs": str(self.ufs),
            "alluxio.security.authentication.type": "SIMPLE",
            "alluxio.security.authorization.permission.enabled": "false",
            "alluxio.s3.rest.authentication.enabled": "false",
            "alluxio.web.ui.enabled": "false",
            "alluxio.worker.block.store.type": "PAGE",
            "alluxio.worker.page.store.type": "LOCAL",
            "alluxio.worker.page.store.page.size": "1MB",
            "alluxio.worker.page.store.dirs": str(self.root / "pages"),
            "alluxio.worker.page.store.sizes": "2GB",
            "alluxio.user.block.size.bytes.default": "4MB",
            "alluxio.user.short.circuit.enabled": "false",
            "alluxio.user.file.passive.cache.enabled": "false",
            "alluxio.user.file.metadata.sync.interval": "1min",
            "alluxio.proxy.s3.bucketpathcache.timeout": "1min",
            "alluxio.worker.hostname": "127.0.0.1",
            "alluxio.worker.rpc.port": str(worker_rpc),
            "alluxio.worker.web.port": str(worker_web),
            "alluxio.proxy.hostname": "127.0.0.1",
            "alluxio.proxy.web.port": str(proxy_web),
            "alluxio.user.hostname": "127.0.0.1",
            "alluxio.master.hostname": "127.0.0.1",
            "alluxio.master.rpc.port": str(master_rpc[0]),
            "alluxio.master.web.port": str(master_web[0]),
            "alluxio.master.embedded.journal.port": str(master_raft[0]),
        }
        if self.masters >= 3:  # as roles/alluxio's alluxio_ha_site renders it
            site["alluxio.master.embedded.journal.addresses"] = ",".join(
                f"127.0.0.1:{port}" for port in master_raft
            )
            site["alluxio.master.rpc.addresses"] = ",".join(f"127.0.0.1:{port}" for port in master_rpc)
            if self.role_ha:
                site.update(role_ha_settings())
        (self.conf / "alluxio-site.properties").write_text(
            "".join(f"{key}={value}\n" for key, value in site.items())
        )
        (self.conf / "log4j2.properties").write_text(
            "status = warn\nappender.console.type = Console\nappender.console.name = STDOUT\n"
            "appender.console.layout.type = PatternLayout\n"
            "appender.console.layout.pattern = %d{ISO8601} %-5p [%t] %c{1}: %m%n\n"
            "rootLogger.level = warn\nrootLogger.appenderRef.stdout.ref = STDOUT\n"
        )
        for index in range(self.masters):
            name = f"master-{index}"
            # An existing journal directory is what Alluxio 2.9's embedded journal takes as formatted
            # (roles/alluxio creates it the same way).
            (self.root / name / "journal").mkdir(parents=True)
            (self.root / name / "metastore").mkdir(parents=True)
            self.daemons[name] = Daemon(
                name,
                "master",
                {
                    "alluxio.master.rpc.port": str(master_rpc[index]),
                    "alluxio.master.web.port": str(master_web[index]),
                    "alluxio.master.embedded.journal.port": str(master_raft[index]),
                    "alluxio.master.journal.folder": str(self.root / name / "journal"),
                    "alluxio.master.metastore.dir": str(self.root / name / "metastore"),
                },
            )
            self.web_ports[name] = master_web[index]
        self.daemons["worker"] = Daemon("worker", "worker", {})
        self.daemons["proxy"] = Daemon("proxy", "proxy", {})
        self.proxy_url = f"http://127.0.0.1:{proxy_web}/api/v1/s3"

    MAIN: ClassVar[dict[str, str]] = {
        "master": "alluxio.master.AlluxioMaster",
        "worker": "alluxio.worker.AlluxioWorker",
        "proxy": "alluxio.proxy.AlluxioProxy",
    }

    def start(self, name: str) -> None:
        daemon = self.daemons[name]
        daemon.log = self.root / f"{name}.log"
        overrides = [f"-D{key}={value}" for key, value in daemon.properties.items()]
        command = [
            self.java,
            "-Xms64m",
            "-Xmx512m",
            "-cp",
            f"{self.conf}:{self.dist}/lib/*",
            f"-Dalluxio.home={self.root}",
            f"-Dalluxio.conf.dir={self.conf}",
            f"-Dalluxio.logs.dir={self.root}",
            "-Djava.net.preferIPv4Stack=true",
            *overrides,
            self.MAIN[daemon.kind],
        ]
        with open(daemon.log, "ab") as log:
            daemon.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=self.root)

    def kill(self, name: str) -> None:
        process = self.daemons[name].process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGKILL)
            process.wait()

    def stop_all(self) -> None:
        for name in self.daemons:
            self.kill(name)

    def master_info(self, name: str, timeout: float = 2.0) -> dict | None:
        url = f"http://127.0.0.1:{self.web_ports[name]}/api/v1/master/info"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                return json.loads(response.read())
        except (OSError, urllib.error.URLError, ValueError):
            return None

    def leader(self) -> str | None:
        """The first master (of those running) whose web port answers: the leader."""
        for name, daemon in self.daemons.items():
            running = daemon.process is not None and daemon.process.poll() is None
            if daemon.kind == "master" and running and self.master_info(name) is not None:
                return name
        return None

    def wait(self, what: str, check, timeout: float = 180.0) -> float:
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            for name, daemon in self.daemons.items():
                if daemon.process is not None and daemon.process.poll() not in (None, -9):
                    tail = daemon.log.read_text(errors="replace")[-1500:] if daemon.log else ""
                    raise SystemExit(
                        f"Alluxio {name} exited ({daemon.process.returncode}) while waiting for "
                        f"{what}; its log ({daemon.log}) ends:\n{tail}"
                    )
            if check():
                return time.monotonic() - start
            time.sleep(0.2)
        raise SystemExit(f"gave up after {timeout:.0f} s waiting for {what}; logs in {self.root}")


# The proxy runs with authentication off (alluxio.s3.rest.authentication.enabled=false) but still reads the
# request's user from its Authorization header's access key id; the signature is not checked.
AUTHORIZATION = (
    f"AWS4-HMAC-SHA256 Credential={os.environ.get('USER', 'root')}/20260101/us-east-1/s3/aws4_request, "
    "SignedHeaders=host, Signature=0"
)


def get(url: str, byte_range: tuple[int, int] | None, timeout: float) -> bytes:
    headers = {"Authorization": AUTHORIZATION}
    if byte_range:
        headers["Range"] = f"bytes={byte_range[0]}-{byte_range[1] - 1}"
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.read()


@dataclass
class Read:
    start: float
    end: float
    ok: bool
    wrong_bytes: bool = False


def make_objects(ufs: Path, count: int, size: int) -> dict[str, bytes]:
    bucket = ufs / BUCKET
    bucket.mkdir(parents=True)
    objects = {}
    for index in range(count):
        data = os.urandom(size)
        (bucket / f"episode-{index:03d}.mcap").write_bytes(data)
        objects[f"episode-{index:03d}.mcap"] = data
    return objects


def reader(tier: Tier, objects: dict[str, bytes], stop: threading.Event, reads: list[Read], timeout: float):
    """Page ranges of every object in turn, through the proxy, each checked against the file's bytes."""
    names = sorted(objects)
    position = 0
    while not stop.is_set():
        name = names[position % len(names)]
        pages = len(objects[name]) // PAGE
        page = (position // len(names)) % pages
        span = (page * PAGE, (page + 1) * PAGE)
        started = time.monotonic()
        try:
            data = get(f"{tier.proxy_url}/{BUCKET}/{name}", span, timeout)
            wrong = data != objects[name][span[0] : span[1]]
            reads.append(Read(started, time.monotonic(), not wrong, wrong))
        except (OSError, urllib.error.URLError):
            reads.append(Read(started, time.monotonic(), False))
            time.sleep(0.1)  # a refused connection returns at once; do not spin
        position += 1


def run_setup(label: str, masters: int, args, dist: Path, workdir: Path, role_ha: bool = True) -> dict:
    root = workdir / label
    root.mkdir()
    tier = Tier(root=root, dist=dist, java=args.java, masters=masters, role_ha=role_ha)
    objects = make_objects(tier.ufs, args.objects, args.object_mb * PAGE)
    reads: list[Read] = []
    stop = threading.Event()
    thread: threading.Thread | None = None
    try:
        console.print(f"[bold]{label}[/]: starting {masters} master(s), a worker and a proxy")
        for name, daemon in tier.daemons.items():
            if daemon.kind == "master":
                tier.start(name)
        elected = tier.wait("a leading master", lambda: tier.leader() is not None)
        tier.start("worker")

        def worker_active() -> bool:
            info = tier.master_info(tier.leader() or "master-0") or {}
            return any(worker.get("state") == "ACTIVE" for worker in info.get("workers", []))

        tier.wait("the worker to register", worker_active)
        tier.start("proxy")

        def proxy_serves() -> bool:
            try:
                get(f"{tier.proxy_url}/{BUCKET}/{sorted(objects)[0]}", (0, 1), 5.0)
                return True
            except (OSError, urllib.error.URLError):
                return False

        tier.wait("the proxy to serve", proxy_serves, timeout=60)
        # Warm: every page once, so the reads measured are cache hits (the worker's pages).
        for name, data in objects.items():
            if get(f"{tier.proxy_url}/{BUCKET}/{name}", None, 60.0) != data:
                raise SystemExit(f"{label}: {name} read through the proxy differs from the file")
        thread = threading.Thread(target=reader, args=(tier, objects, stop, reads, args.read_timeout))
        thread.start()
        time.sleep(args.before)
        victim = tier.leader()
        if victim is None:
            raise SystemExit(f"{label}: no leader answered before the kill")
        killed_at = time.monotonic()
        tier.kill(victim)
        console.print(f"{label}: killed {victim} (the leader)")
        if masters == 1:
            time.sleep(RESTART_DELAY_S)
            tier.start(victim)
        tier.wait("a master serving again", lambda: tier.leader() is not None, timeout=args.timeout)
        serving_after_kill = time.monotonic() - killed_at
        new_leader = tier.leader()
        # Reads resume, then go on for a while: the stall is over only when reads succeed steadily again.
        tier.wait(
            "reads to resume",
            lambda: any(r.ok and r.start > killed_at for r in reads),
            timeout=args.timeout,
        )
        time.sleep(args.after)
    finally:
        # Also on an error: the reader would otherwise retry forever and keep the process alive.
        stop.set()
        if thread is not None:
            thread.join()
        tier.stop_all()
    return {
        "masters": masters,
        "elected_first_s": round(elected, 2),
        "killed": victim,
        "new_leader": new_leader,
        # From the kill: the new leader's election, or the restart delay and the restarted master's start.
        "master_back_s": round(serving_after_kill, 2),
        **read_figures(reads, killed_at),
    }


def read_figures(reads: list[Read], killed_at: float) -> dict:
    """The reads' longest stall from the kill on (the longest gap between two reads completed one after the
    other, from the last read completed before the kill to the end of the run: a stall that begins only
    after a few more reads counts too), their count, failures, wrong bytes, and the median before."""
    completions = sorted(r.end for r in reads if r.ok)
    before = [end for end in completions if end <= killed_at]
    after = [end for end in completions if end > killed_at]
    stall = None
    if before and after:
        window = [before[-1], *after]
        stall = max(b - a for a, b in itertools.pairwise(window))
    latencies = sorted(r.end - r.start for r in reads if r.ok and r.end <= killed_at)
    return {
        "read_stall_s": round(stall, 2) if stall is not None else None,
        "reads": len(reads),
        "reads_failed": sum(1 for r in reads if not r.ok and not r.wrong_bytes),
        "reads_wrong_bytes": sum(1 for r in reads if r.wrong_bytes),
        "read_p50_ms_before": round(1000 * latencies[len(latencies) // 2], 1) if latencies else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="fewer, smaller objects and shorter phases (< 2 min)"
    )
    parser.add_argument("--json", type=Path, help="write every figure here")
    parser.add_argument("--dist", type=Path, help="the Alluxio distribution (tar or unpacked directory)")
    parser.add_argument("--java", default=shutil.which("java") or "java", help="the JDK's java (17)")
    parser.add_argument("--keep", action="store_true", help="keep the daemons' logs and data (printed)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for a master or reads")
    args = parser.parse_args()
    args.objects, args.object_mb = (4, 4) if args.quick else (16, 16)
    args.before, args.after = (3.0, 3.0) if args.quick else (10.0, 10.0)
    args.read_timeout = 60.0

    dist_source = find_distribution(args.dist)
    results: dict = {
        "commit": git_commit(),
        "alluxio": VERSION,
        "distribution": dist_source.name,
        "java": subprocess.run([args.java, "-version"], capture_output=True, text=True).stderr.splitlines()[
            0
        ],
        "objects": args.objects,
        "object_mb": args.object_mb,
        "quick": args.quick,
        "restart_delay_s": RESTART_DELAY_S,
    }
    workdir = Path(tempfile.mkdtemp(prefix="megahour-cache-failover-"))
    try:
        dist = unpack(dist_source, workdir)
        results["baseline_one_master"] = run_setup("baseline", 1, args, dist, workdir)
        if not args.quick:
            results["three_masters_alluxio_defaults"] = run_setup(
                "alluxio-defaults", 3, args, dist, workdir, role_ha=False
            )
        results["ours_three_masters"] = run_setup("ours", 3, args, dist, workdir)
    finally:
        if args.keep:
            console.print(f"daemons' logs and data kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    base, ours = results["baseline_one_master"], results["ours_three_masters"]
    setups = {
        "baseline: 1 master, restarted after 5 s": base,
        "3 masters, Alluxio's election timeouts (10-20 s)": results.get("three_masters_alluxio_defaults"),
        "ours: 3 masters, the role's settings (3-6 s)": ours,
    }
    setups = {label: figures for label, figures in setups.items() if figures is not None}
    for label, figures in setups.items():
        if figures["reads_wrong_bytes"]:
            raise SystemExit(
                f"{label}: {figures['reads_wrong_bytes']} reads returned other bytes than the file's"
            )
    if base["read_stall_s"] and ours["read_stall_s"]:
        results["stall_ratio_baseline_over_ours"] = round(base["read_stall_s"] / ours["read_stall_s"], 2)
    if base["master_back_s"] and ours["master_back_s"]:
        results["master_back_ratio_baseline_over_ours"] = round(
            base["master_back_s"] / ours["master_back_s"], 2
        )

    table = Table(title=f"The leading cache master killed under reads (Alluxio {VERSION}, one host)")
    table.add_column("")
    for label in setups:
        table.add_column(label, justify="right")
    keys = (
        "read_stall_s",
        "master_back_s",
        "reads",
        "reads_failed",
        "reads_wrong_bytes",
        "read_p50_ms_before",
    )
    for key in keys:
        table.add_row(key, *(str(figures[key]) for figures in setups.values()))
    console.print(table)
    for key, what in (
        ("stall_ratio_baseline_over_ours", "read stall"),
        ("master_back_ratio_baseline_over_ours", "time to a serving master"),
    ):
        if key in results:
            console.print(f"{what}, baseline / ours: {results[key]}x")
    write_json(args.json, results, console)
    return 0


if __name__ == "__main__":
    sys.exit(main())
