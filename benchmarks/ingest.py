#!/usr/bin/env python3
"""Ingestion: the bin-packer's balance, DAG throughput against the monolithic job, and the metadata
database's write bursts with and without staggered starts, in one run.

1. **Bin-packer balance** (pure, always runs): max/mean bytes per worker for 10k files with lognormal
   sizes, ours against round-robin and count-equal batching, at several worker counts.
2. **Throughput** (needs the local cluster from `make up`): the same landing zone of simulated raw
   episodes (one corrupt) ingested twice, in the same run:
     monolithic  `megahour ingest monolithic` in one process on compute node gpu-1 (every step serially)
     pair        two monolithic processes at once, one on gpu-1 and one on gpu-2, each over a byte-balanced
                 half: the ceiling two workers reach on these two cores with no orchestration at all
     dag         the `megahour_ingest` Airflow DAG, triggered through the REST API; its steps run as Slurm
                 jobs on the `ingest` partition
   Figures: episode-hours ingested per wall-clock hour; the ratios dag/monolithic and pair/monolithic.
3. **Write bursts** (same cluster): the DAG over the rendered episodes (no copies) in up to
   ``--burst-workers`` batches (default 8: a wide fan-out), with ``jitter_s = 0`` and with the stagger
   on, alternating, ``--burst-repeats`` times (default 3: one run's peak is one second's luck), while a
   sampler inside `ctl` reads PostgreSQL's next transaction id and WAL position every 0.25 s. Figures:
   peak write transactions and WAL bytes per second over 1 s windows, their medians over the repeats,
   and the reduction of the medians.

    python benchmarks/ingest.py --quick --json benchmarks/results/ingest.json
    python benchmarks/ingest.py --json benchmarks/results/ingest.json      # 16 rendered episodes of ~3 s, x10
    python benchmarks/ingest.py --only bursts --json benchmarks/results/ingest-bursts.json
    python benchmarks/ingest.py --no-cluster                                # bin-packer only
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shlex
import ssl
import sys
import time
import urllib.error
import urllib.request
from datetime import datetime
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import git_commit, in_container, podman, running_containers, shared_mountpoint, write_json
from megahour.ingest import binpack

console = Console(stderr=True)
REPO = Path(__file__).resolve().parent.parent
DAG_ID = "megahour_ingest"
CONTROLLER, NODE = "ctl", "gpu-1"
SERVICE_USER = "airflow"
SHARED = "/srv/megahour"


# -- 1. bin-packer balance ----------------------------------------------------------------------------


def packer_balance(files: int, workers: tuple[int, ...], seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    # Episode sizes: lognormal around ~25 MB with a long tail (sigma 1: the largest is ~50x the median).
    sizes = [int(s) for s in rng.lognormal(mean=np.log(25e6), sigma=1.0, size=files)]
    rows = []
    for w in workers:
        began = time.perf_counter()
        ours = binpack.pack(sizes, w)
        pack_s = time.perf_counter() - began

        def bal(batches: list[list[int]]) -> float:
            return binpack.balance([sum(sizes[i] for i in b) for b in batches])

        row = {
            "workers": w,
            "ours_max_over_mean": bal(ours),
            "round_robin_max_over_mean": bal(binpack.round_robin(files, w)),
            "count_equal_max_over_mean": bal(binpack.count_equal(files, w)),
            "lower_bound": binpack.lower_bound_balance(sizes, w),
            "pack_s": pack_s,
        }
        rows.append(row)
    table = Table(title=f"bin-packer: max/mean bytes per worker, {files:,} lognormal files")
    for col in ("workers", "ours", "round-robin", "count-equal", "lower bound", "pack s"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            str(r["workers"]),
            f"{r['ours_max_over_mean']:.5f}",
            f"{r['round_robin_max_over_mean']:.4f}",
            f"{r['count_equal_max_over_mean']:.4f}",
            f"{r['lower_bound']:.5f}",
            f"{r['pack_s']:.3f}",
        )
    console.print(table)
    return {
        "files": files,
        "rows": rows,
        "worst_ours_max_over_mean": max(r["ours_max_over_mean"] for r in rows),
        "target_max_over_mean": 1.02,
    }


# -- the local cluster ---------------------------------------------------------------------------------


def cluster_ready() -> str | None:
    """None when the local cluster runs Airflow; otherwise why the cluster parts are skipped."""
    out = running_containers()
    if isinstance(out, str):
        return out
    if CONTROLLER not in out or NODE not in out:
        return "the local cluster is not up; run `make up` first"
    state = in_container(CONTROLLER, "systemctl is-active airflow-scheduler airflow-api-server", check=False)
    if state.returncode != 0:
        return "Airflow is not running on ctl; deploy with `make deploy`"
    return None


class Airflow:
    """The Airflow 3 REST API of the local cluster (token from the role's generated admin password)."""

    def __init__(self, base_url: str, user: str, password: str, cafile: Path) -> None:
        self.base_url = base_url.rstrip("/")
        # The API server's certificate is the host's, from the deploy's cluster CA (roles/pki).
        self.tls = ssl.create_default_context(cafile=str(cafile))
        self.token = self._request(
            "POST", "/auth/token", {"username": user, "password": password}, auth=False
        )["access_token"]

    def _request(self, method: str, path: str, body: dict | None = None, auth: bool = True) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base_url + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        if auth:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=60, context=self.tls) as resp:
                return json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"{method} {path}: HTTP {exc.code}: {exc.read()[:500]!r}") from None

    def unpause(self) -> None:
        self._request("PATCH", f"/api/v2/dags/{DAG_ID}", {"is_paused": False})

    def trigger(self, conf: dict, run_id: str) -> str:
        self.unpause()  # a run triggered on a paused DAG only queues
        body = {"dag_run_id": run_id, "logical_date": None, "conf": conf}
        return self._request("POST", f"/api/v2/dags/{DAG_ID}/dagRuns", body)["dag_run_id"]

    def wait(self, run_id: str, timeout: float = 3600) -> dict:
        """The finished run. Polled every 3 s: the API server shares the 2 cores with the steps, and the
        wall time comes from the run's own end_date, so a slow poll costs no precision."""
        began = time.monotonic()
        while time.monotonic() - began < timeout:
            run = self._request("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}")
            if run["state"] in ("success", "failed"):
                return run
            time.sleep(3)
        raise TimeoutError(f"DAG run {run_id} did not finish in {timeout} s")


def landing_source(count: int, seconds: float, cameras: str, seed: int) -> Path:
    """Simulated raw episodes (the last one corrupt), cached by their parameters: rendering is slow."""
    from megahour.ingest.landing import write_landing

    cache = REPO / ".cache" / "bench-ingest" / f"landing-{count}x{seconds:g}s-{cameras}-seed{seed}"
    if not (cache / ".complete").exists():
        console.print(f"simulating {count} raw episodes of ~{seconds:g} s ({cameras} cameras) into {cache}")
        write_landing(cache, count, corrupt=1, seconds=seconds, seed=seed, cameras=cameras)
        (cache / ".complete").touch()
    return cache


def share_bench() -> None:
    """Give the staged landing zones to the ingest service user, which the steps run as."""
    in_container(
        CONTROLLER, f"chown -R {SERVICE_USER}:megahour {SHARED}/bench && chmod -R g+w {SHARED}/bench"
    )


def stage(source: Path, tag: str) -> str:
    """Copy the landing zone into the shared volume; returns its path inside the containers."""
    import shutil

    host = shared_mountpoint() / "bench" / tag
    if host.exists():
        shutil.rmtree(host)
    shutil.copytree(source, host / "landing", ignore=shutil.ignore_patterns(".complete"))
    share_bench()
    return f"{SHARED}/bench/{tag}"


def episode_seconds(source: Path) -> float:
    """Seconds of good (registrable) episodes in a landing zone."""
    from megahour.episodes.errors import EpisodeError
    from megahour.ingest.work import StepFailed, raw_info

    total = 0.0
    for path in sorted(source.glob("*.mcap")):
        try:
            total += raw_info(str(path))["duration_s"]
        except (EpisodeError, StepFailed):  # the corrupt one: ingestion quarantines it
            continue
    return total


def run_monolithic(base: str, node: str = NODE) -> dict:
    params = json.dumps({"landing": f"{base}/landing", "storage": f"{base}/storage-monolithic"})
    command = (
        f"megahour ingest monolithic --json --run-dir {base}/runs/monolithic --params {shlex.quote(params)}"
    )
    began = time.perf_counter()
    out = in_container(node, command, user=SERVICE_USER)
    wall = time.perf_counter() - began
    summary = json.loads(out.stdout[out.stdout.index("{") :])
    return {"wall_s": wall, "registered": summary["registered"], "quarantined": len(summary["quarantined"])}


def stage_halves(source: Path, tag: str) -> list[str]:
    """The landing zone split in two byte-balanced halves (our packer), each staged on its own; returns
    their paths inside the containers."""
    import shutil

    files = sorted(source.glob("*.mcap"))
    halves = binpack.pack([f.stat().st_size for f in files], 2)
    bases = []
    for h, indexes in enumerate(halves):
        host = shared_mountpoint() / "bench" / f"{tag}-half{h}"
        if host.exists():
            shutil.rmtree(host)
        (host / "landing").mkdir(parents=True)
        for i in indexes:
            shutil.copy2(files[i], host / "landing" / files[i].name)
        bases.append(f"{SHARED}/bench/{tag}-half{h}")
    share_bench()
    return bases


def run_monolithic_pair(bases: list[str], nodes: tuple[str, str] = (NODE, "gpu-2")) -> dict:
    """The hardware ceiling for two workers on this machine: two monolithic processes at once, one per
    compute node, each over its half of the landing zone, with no Airflow and no Slurm in the way.

    The DAG cannot beat this: it runs the same step code on the same two cores, plus orchestration."""
    from concurrent.futures import ThreadPoolExecutor

    # Both start within milliseconds of each other, so the slower half's own wall time is the pair's.
    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        halves = list(pool.map(run_monolithic, bases, nodes))
    return {
        "wall_s": max(h["wall_s"] for h in halves),
        "half_wall_s": [h["wall_s"] for h in halves],
        "registered": sum(h["registered"] for h in halves),
        "quarantined": sum(h["quarantined"] for h in halves),
    }


def airflow_client() -> Airflow:
    address = in_container(CONTROLLER, "hostname -I").stdout.split()[0]
    secrets = REPO / "inventories" / "local" / ".secrets"
    password = (secrets / "airflow_admin").read_text().strip()
    return Airflow(f"https://{address}:8080", "admin", password, secrets / "pki" / "ca.crt")


AIRFLOW_UNITS = ("airflow-api-server", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer")


# CPU ticks of every process in a unit's cgroup: own time plus that of its reaped children (task runners
# that have exited count through their parents). systemd's CPUUsageNSec is not set here: the containers
# run on cgroup v1 without per-unit cpuacct.
UNIT_TICKS = r"""
for u in {units}; do
  cg=$(systemctl show -p ControlGroup --value "$u")
  t=0
  for p in $(cat "/sys/fs/cgroup/systemd$cg/cgroup.procs" 2>/dev/null); do
    v=$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | awk '{{print $12+$13+$14+$15}}')
    t=$((t + ${{v:-0}}))
  done
  echo "$u $t $(getconf CLK_TCK)"
done
"""


def unit_cpu_s() -> dict[str, float]:
    """CPU seconds each Airflow unit on ctl has used so far, to show what orchestration costs in a run."""
    out = in_container(CONTROLLER, UNIT_TICKS.format(units=" ".join(AIRFLOW_UNITS))).stdout
    usage = {}
    for line in out.splitlines():
        unit, ticks, hz = line.split()
        usage[unit.removeprefix("airflow-")] = int(ticks) / int(hz)
    return usage


SAMPLER_PID = "/tmp/megahour-pg-sampler.pid"
# psql's -c cannot mix SQL and a meta-command, and a second -c '\\watch' re-runs an empty buffer (one
# sample only); fed on stdin, `<query> \\watch 0.25` repeats the query every 0.25 s in one session.
PG_SAMPLE_QUERY = (
    "select extract(epoch from clock_timestamp()), pg_snapshot_xmax(pg_current_snapshot()), "
    "pg_current_wal_lsn() - '0/0'::pg_lsn \\watch 0.25"
)
PG_SAMPLER = (
    f"echo $$ > {SAMPLER_PID}; exec runuser -u postgres -- psql -XAtq -d airflow "
    f"> /tmp/megahour-pg-samples 2>&1 <<< {shlex.quote(PG_SAMPLE_QUERY)}"
)


def stop_sampler() -> None:
    in_container(
        CONTROLLER,
        f"if [ -f {SAMPLER_PID} ]; then kill $(cat {SAMPLER_PID}) || true; rm -f {SAMPLER_PID}; fi",
    )


def run_dag(
    client: Airflow, base: str, run_id: str, jitter_s: float, sample: bool = False, max_workers: int = 0
) -> dict:
    conf = {"landing": f"{base}/landing", "storage": f"{base}/storage-{run_id}", "jitter_s": jitter_s}
    if max_workers:
        conf["max_workers"] = max_workers
    if sample:
        stop_sampler()
        in_container(CONTROLLER, "rm -f /tmp/megahour-pg-samples")
        podman("exec", "-d", CONTROLLER, "bash", "-lc", PG_SAMPLER)
    cpu_before = unit_cpu_s()
    began = time.time()  # the containers share this host's clock
    client.trigger(conf, run_id)
    run = client.wait(run_id)
    end = datetime.fromisoformat(run["end_date"].replace("Z", "+00:00")).timestamp()
    cpu_after = unit_cpu_s()
    result = {"wall_s": end - began, "state": run["state"], "jitter_s": jitter_s}
    # CPU the Airflow services took from the two cores during the run (polling after the end adds < 3 s).
    result["airflow_cpu_s"] = {u: cpu_after[u] - cpu_before[u] for u in cpu_after if u in cpu_before}
    result["airflow_cpu_share_of_one_core"] = sum(result["airflow_cpu_s"].values()) / (time.time() - began)
    summary_path = shared_mountpoint() / "ingest" / "runs" / run_id / "steps" / "summary.json"
    if summary_path.exists():
        summary = json.loads(summary_path.read_text())
        result.update(registered=summary["registered"], quarantined=len(summary["quarantined"]))
    if sample:
        stop_sampler()
        text = in_container(CONTROLLER, "cat /tmp/megahour-pg-samples").stdout
        result.update(write_bursts(text))
    return result


def write_bursts(text: str) -> dict:
    """Peak write transactions (new transaction ids) and WAL bytes per 1 s window, from the samples."""
    rows = []
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) == 3:
            try:
                rows.append((float(parts[0]), int(parts[1]), int(float(parts[2]))))
            except ValueError:
                continue
    if len(rows) < 3:
        return {"peak_write_tx_per_s": None, "peak_wal_bytes_per_s": None, "samples": len(rows)}
    t0 = rows[0][0]
    per_second: dict[int, list[tuple[int, int]]] = {}
    for t, xid, lsn in rows:
        per_second.setdefault(int(t - t0), []).append((xid, lsn))
    seconds = sorted(per_second)
    tx, wal = [], []
    for a, b in itertools.pairwise(seconds):
        if b == a + 1:
            tx.append(per_second[b][-1][0] - per_second[a][-1][0])
            wal.append(per_second[b][-1][1] - per_second[a][-1][1])
    return {
        "peak_write_tx_per_s": max(tx) if tx else None,
        "mean_write_tx_per_s": (rows[-1][1] - rows[0][1]) / (rows[-1][0] - t0),
        "peak_wal_bytes_per_s": max(wal) if wal else None,
        "samples": len(rows),
    }


def replicate(source: Path, replicas: int) -> Path:
    """The rendered episodes plus ``replicas - 1`` copies of each under new ids (same bytes to process).

    Rendering is ~4x slower than ingesting, so a landing zone big enough to amortise the DAG's per-task
    overhead is built from fewer rendered episodes. The corrupt one is not copied.
    """
    from megahour.episodes import mcapio
    from megahour.episodes.errors import EpisodeError
    from megahour.episodes.source import LocalSource
    from megahour.ingest.landing import LABELS_METADATA

    if replicas <= 1:
        return source
    dest = source.with_name(f"{source.name}-x{replicas}")
    if (dest / ".complete").exists():
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    for path in sorted(source.glob("*.mcap")):
        try:
            with LocalSource(path) as src:
                index = mcapio.open_index(src)
                recording = mcapio.read_recording(src)
        except EpisodeError:
            (dest / path.name).write_bytes(path.read_bytes())  # the corrupt one, once
            continue
        labels = dict(index.metadata[LABELS_METADATA])
        for r in range(replicas):
            episode_id = labels["episode_id"] if r == 0 else f"{labels['episode_id']}-r{r}"
            out = dest / f"{episode_id}.mcap"
            chunks = mcapio.per_topic_chunks(recording.messages)
            mcapio.write_episode(
                out, recording.topics, chunks, {LABELS_METADATA: {**labels, "episode_id": episode_id}}
            )
            out.chmod(0o644)
    (dest / ".complete").touch()
    return dest


def throughput_figures(count: int, seconds: float, cameras: str, replicas: int, tag: str) -> dict:
    """The same landing zone through the monolithic job, two bare monolithic processes, and the DAG
    (stagger off: nothing waits on purpose)."""
    client = airflow_client()
    source = replicate(landing_source(count, seconds, cameras, seed=11), replicas)
    episodes = len(list(source.glob("*.mcap")))
    hours = episode_seconds(source) / 3600
    base = stage(source, tag)
    console.print(f"[bold]monolithic[/] over {episodes} episodes ({hours * 3600:.0f} s of good episodes)")
    mono = run_monolithic(base)
    console.print(f"  {mono['wall_s']:.1f} s, {mono['registered']} registered")
    console.print("[bold]two monolithic processes[/] at once, one per compute node, on byte-balanced halves")
    pair = run_monolithic_pair(stage_halves(source, tag))
    console.print(f"  {pair['wall_s']:.1f} s, {pair['registered']} registered")
    console.print(f"[bold]DAG[/] over the same {episodes} episodes (jitter 0)")
    dag = run_dag(client, base, f"{tag}-throughput", 0.0)
    console.print(
        f"  {dag['wall_s']:.1f} s, {dag['state']}, {dag.get('registered')} registered; Airflow used "
        f"{dag['airflow_cpu_share_of_one_core']:.0%} of one core ({dag['airflow_cpu_s']})"
    )
    per_hour_mono = hours / (mono["wall_s"] / 3600)
    per_hour_dag = hours / (dag["wall_s"] / 3600) if dag["state"] == "success" else None
    return {
        "episodes": episodes,
        "rendered_episodes": count,
        "replicas": replicas,
        "episode_seconds_good": hours * 3600,
        "monolithic": mono,
        "dag": dag,
        "episode_hours_per_hour_monolithic": per_hour_mono,
        "episode_hours_per_hour_dag": per_hour_dag,
        "dag_over_monolithic": per_hour_dag / per_hour_mono if per_hour_dag else None,
        "target_dag_over_monolithic": 1.7,
        # The ceiling: what two workers can get from these two cores with no orchestration at all.
        "monolithic_pair": pair,
        "ceiling_two_workers_over_monolithic": mono["wall_s"] / pair["wall_s"],
        "dag_over_ceiling": pair["wall_s"] / dag["wall_s"] if per_hour_dag else None,
    }


def burst_figures(
    count: int, seconds: float, cameras: str, jitter_s: float, workers: int, repeats: int, tag: str
) -> dict:
    """The rendered episodes without copies, spread over ``workers`` batches (a wide fan-out, where
    simultaneous starts pile up), through the DAG without and with staggered starts while the metadata
    database is sampled; ``repeats`` pairs, alternating, because one run's peak is one second's luck."""
    client = airflow_client()
    base = stage(landing_source(count, seconds, cameras, seed=11), f"{tag}-bursts")
    runs: dict[str, list[dict]] = {"no_stagger": [], "stagger": []}
    for r in range(repeats):
        for label, jitter in (("no_stagger", 0.0), ("stagger", jitter_s)):
            console.print(
                f"[bold]DAG[/] over {count} episodes in up to {workers} batches, jitter {jitter:g} s "
                f"({r + 1}/{repeats}), sampling the metadata database"
            )
            run = run_dag(client, base, f"{tag}-{label}-{r}", jitter, sample=True, max_workers=workers)
            console.print(
                f"  {run['wall_s']:.1f} s, {run['state']}, peak {run.get('peak_write_tx_per_s')} write tx/s, "
                f"peak {run.get('peak_wal_bytes_per_s')} WAL bytes/s"
            )
            runs[label].append(run)
    result: dict = {
        "bursts_episodes": count,
        "bursts_max_workers": workers,
        "bursts_repeats": repeats,
        "jitter_s": jitter_s,
        "dag_no_stagger_runs": runs["no_stagger"],
        "dag_stagger_runs": runs["stagger"],
    }
    for key in ("peak_write_tx_per_s", "peak_wal_bytes_per_s"):
        medians = {}
        for label, label_runs in runs.items():
            peaks = [run[key] for run in label_runs if run.get(key)]
            medians[label] = float(np.median(peaks)) if peaks else None
            result[f"{key}_median_{label}"] = medians[label]  # e.g. peak_write_tx_per_s_median_stagger
        if medians["no_stagger"] and medians["stagger"]:
            # peak_write_tx_reduction, peak_wal_bytes_reduction: from the medians over the repeats
            result[key.replace("_per_s", "_reduction")] = 1 - medians["stagger"] / medians["no_stagger"]
    return result


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="fewer files and episodes (< 2 min on a warm cache)"
    )
    parser.add_argument("--json", type=Path, help="write every figure here")
    parser.add_argument(
        "--plots", type=Path, help="also draw its PNG plots into this directory (benchmarks/plots.py)"
    )
    parser.add_argument(
        "--no-cluster", action="store_true", help="the bin-packer only (no local cluster needed)"
    )
    parser.add_argument(
        "--episodes", type=int, help="rendered raw episodes for the throughput runs (default 16; quick 6)"
    )
    parser.add_argument("--replicas", type=int, help="copies of each under new ids (default 10; quick 1)")
    parser.add_argument("--seconds", type=float, help="median episode length (default 3; quick 2)")
    parser.add_argument("--cameras", choices=["small", "default"], default="default")
    parser.add_argument("--jitter", type=float, default=10.0, help="stagger jitter for the staggered run (s)")
    parser.add_argument(
        "--burst-workers", type=int, default=8, help="max_workers (batches) for the write-burst runs"
    )
    parser.add_argument(
        "--burst-repeats", type=int, help="pairs of write-burst runs, alternating (default 3; quick 1)"
    )
    parser.add_argument(
        "--only", choices=["throughput", "bursts"], help="run one of the two cluster parts (default both)"
    )
    args = parser.parse_args()
    began = time.perf_counter()
    results: dict = {"commit": git_commit()}
    workers = (2, 8, 32) if args.quick else (2, 4, 8, 16, 32, 64, 128)
    results["binpack"] = packer_balance(10_000, workers)
    if args.no_cluster:
        results["cluster"] = {"skipped": "--no-cluster"}
    elif reason := cluster_ready():
        console.print(f"[yellow]cluster figures skipped:[/] {reason}")
        results["cluster"] = {"skipped": reason}
    else:
        count = args.episodes or (6 if args.quick else 16)
        seconds = args.seconds or (2.0 if args.quick else 3.0)
        replicas = args.replicas or (1 if args.quick else 10)
        repeats = args.burst_repeats or (1 if args.quick else 3)
        tag = f"b{int(time.time())}"
        c: dict = {}
        if args.only in (None, "throughput"):
            c.update(throughput_figures(count, seconds, args.cameras, replicas, tag))
            console.print(
                f"[bold]throughput[/]: dag/monolithic = {c['dag_over_monolithic']} (target 1.7); "
                f"ceiling (two bare processes) {c['ceiling_two_workers_over_monolithic']:.3f}"
            )
        if args.only in (None, "bursts"):
            c.update(
                burst_figures(count, seconds, args.cameras, args.jitter, args.burst_workers, repeats, tag)
            )
            console.print(
                f"[bold]reduction from staggering[/] (medians of {repeats}): "
                f"peak write tx/s {c.get('peak_write_tx_reduction')}, "
                f"peak WAL bytes/s {c.get('peak_wal_bytes_reduction')}"
            )
        results["cluster"] = c
    results["total_s"] = time.perf_counter() - began
    write_json(args.json, results, console)
    if args.plots:
        from plots import draw_for_script  # matplotlib only when plots are asked for

        return draw_for_script("ingest", results, args.plots, console)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
