"""The monitoring role's consoles, rendered by a real Prometheus (the binary of Debian's package, which
`make prereqs` extracts) scraping what megahour's collectors write from real captures: every console
answers and no cell says "no data". The molecule `cluster` scenario checks the same against the
deployed cluster."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from datetime import datetime
from pathlib import Path

import pytest

from megahour.cluster.prereqs import tool_path
from megahour.exporters import cache, gpu, ingest, slurm, warehouse
from megahour.health import kernel_log
from megahour.metrics.textfile import render
from megahour.nvidia import telemetry
from megahour.slurm.client import SlurmClient
from megahour.slurm.parse import parse_sinfo_nodes
from megahour.sweep.metrics import render_metrics
from megahour.sweep.rules import plan_sweep
from megahour.train.metrics import RunMetrics, StepRecord
from tests import localhttp
from tests.conftest import REPO
from tests.exporters.test_ingest import report as ingest_report
from tests.exporters.test_ingest import write_run
from tests.exporters.test_slurm import runner_2411
from tests.exporters.test_warehouse import Replayed
from tests.slurm.fixtures import capture

ROLE = REPO / "roles" / "monitoring" / "files"
CONSOLES = sorted(p.name for p in (ROLE / "consoles").glob("*.html"))
NODATA = "no data"


def exposition(tmp_path: Path, *, with_gpus: bool = True) -> str:
    """What node_exporter would serve: the GPU collector's file (the real 8 x H100 report, a real Xid
    line), the Slurm collector's (Slurm 24.11, a draining node), the sweeper's, the cache's (Alluxio 2.9.6),
    the ingestion collector's (two runs, and Airflow's series as statsd_exporter relays them), the
    warehouse's (ClickHouse 18.16.1's answers) and a training job's."""
    parts = []
    if with_gpus:
        report = telemetry.parse(
            (REPO / "roles/nvidia/files/fake-gpu/h100-healthy/smi-q-8xH100.txt").read_text()
        )
        xids = kernel_log.parse(
            (REPO / "tests/health/fixtures/kernel-xid48-dbe.log").read_text().splitlines()
        )
        parts.append(render(gpu.families(report, xids, now=time.time(), kernel_log_ok=True)))
    parts.append(render(slurm.collect(SlurmClient(runner=runner_2411("draining")), now=time.time()).families))
    nodes = parse_sinfo_nodes(capture("slurm2411-sinfo-nodes-format-draining.txt")).items
    now = datetime.now()
    parts.append(render_metrics(plan_sweep(nodes, {n.name: "PASS" for n in nodes}, now), nodes, now))
    captures = REPO / "tests/exporters/captures"
    master, worker = (
        json.loads((captures / f"alluxio-2.9.6-{d}-idle.json").read_text()) for d in ("master", "worker")
    )
    parts.append(render(cache.families(master, worker, now=time.time(), expected=("master", "worker"))))
    runs = tmp_path / "runs"
    if not runs.exists():
        write_run(runs, "r1", ingest_report("r1"))
        write_run(runs, "r2", ingest_report("r2", registered=4))
    parts.append(render(ingest.families(ingest.read_runs(runs), now=time.time())))
    parts.append((captures / "statsd_exporter-0.31.0-airflow.prom").read_text())
    parts.append(render(warehouse.families(warehouse.collect(Replayed()), now=time.time())))
    textfiles = tmp_path / "textfile"
    textfiles.mkdir(exist_ok=True)
    metrics = RunMetrics(None, rank=0, textfile_dir=textfiles, job="4242")
    metrics.step(StepRecord(step=120, loss=1.25, seconds=0.4, data_wait_seconds=0.004, samples=64))
    parts.append((textfiles / "megahour_train_4242.prom").read_text())
    return "".join(parts)


@pytest.fixture
def prometheus(tmp_path):
    """Start Prometheus on loopback, scraping a page this test serves; yields (base URL, set_page)."""
    binary = tool_path("prometheus")
    if binary is None:
        pytest.fail(
            "prometheus not found: run `make prereqs` (as root) or install Debian's prometheus package"
        )
    page = {"text": ""}
    server = localhttp.serve(lambda: page["text"].encode())
    port = localhttp.closed_port()  # free now: Prometheus takes it
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        f"  - job_name: node\n    static_configs: [{{targets: ['127.0.0.1:{server.server_address[1]}']}}]\n"
    )
    log = (tmp_path / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            f"--web.console.templates={ROLE / 'consoles'}",
            f"--web.console.libraries={ROLE / 'console_libraries'}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        yield base, lambda text: page.__setitem__("text", text)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        server.shutdown()


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def wait_for(base: str, expr: str, deadline_s: float = 30) -> None:
    url = f"{base}/api/v1/query?query={urllib.parse.quote(expr)}"
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            if json.loads(get(url)[1])["data"]["result"]:
                return
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.5)
    raise AssertionError(f"Prometheus never had {expr}")


def test_every_console_has_data_for_every_cell(prometheus, tmp_path):
    base, serve = prometheus
    serve(exposition(tmp_path))
    # two scrapes at least: the cache console's rates need them
    wait_for(base, "megahour_train_step and on() count(megahour_gpu_info) == 8")
    wait_for(base, "count_over_time(megahour_cache_master_leading[1m]) >= 3")
    expected = {
        "index.html": ["Cluster", "GPUs allocated / configured"],
        "gpu.html": ["NVIDIA H100 80GB HBM3", "81559"[:2]],
        "slurm.html": ["s2411", "draining", "Resources"],
        "training.html": ["4242", "running"],
        "cache.html": ["Cache tier", "2.727GiB"],
        # 20 + 4 registered, the failed Airflow run's 41 s, 18.16's table and its inserts' p99 (1.98 ms)
        "ingest.html": ["Ingestion and warehouse", "<td>24 / 2</td>", "megahour.t", "1.98ms"],
    }
    assert sorted(expected) == CONSOLES, "a console without a test, or a test of a console that is gone"
    for console, texts in expected.items():
        status, body = get(f"{base}/consoles/{console}")
        if dump := os.environ.get("MEGAHOUR_CONSOLE_DUMP"):  # keep the pages to look at
            Path(dump, console).write_text(body)
        assert status == 200, (console, body[:2000])
        assert NODATA not in body, (console, body)
        for text in texts:
            assert text in body, (console, text)


def test_a_console_without_its_series_says_no_data(prometheus, tmp_path):
    base, serve = prometheus
    serve(exposition(tmp_path, with_gpus=False))
    wait_for(base, "megahour_train_step")
    status, body = get(f"{base}/consoles/gpu.html")
    assert status == 200 and NODATA in body
