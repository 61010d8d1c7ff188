"""`megahour metrics gpu|slurm|cache|ingest|warehouse`: the textfile collectors the roles run on timers."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from megahour import cliutil

if TYPE_CHECKING:
    from rich.console import Console

    from megahour.metrics.textfile import Family

DEFAULT_TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"
DEFAULT_HEALTH_CONFIG = "/etc/megahour/health.json"
STATSD_EXPORTER_ENV = "MEGAHOUR_STATSD_EXPORTER_URL"


def errors() -> tuple[type[BaseException], ...]:
    from megahour.health.config import ConfigError

    return (ConfigError,)


def register(subparsers: cliutil.Subparsers) -> None:
    group = cliutil.add_group(
        subparsers,
        "metrics",
        help="write GPU, Slurm, cache, ingestion and warehouse metrics for node_exporter's textfile files",
        errors=errors,
    )
    gpu = cliutil.add_command(
        group,
        "gpu",
        _cmd_gpu,
        help="read nvidia-smi -q and the kernel log's Xids here; write megahour_gpu.prom",
        exits={
            0: "written",
            1: "nvidia-smi or the kernel log could not be read (the file says so: exporter_ok 0)",
        },
    )
    gpu.add_argument(
        "--config",
        default=DEFAULT_HEALTH_CONFIG,
        help="the health gate's config, for nvidia-smi's path, the kernel-log command and the timeout",
    )
    slurm = cliutil.add_command(
        group,
        "slurm",
        _cmd_slurm,
        help="ask Slurm for node states, GPUs allocated and the queue; write megahour_slurm.prom",
        exits={0: "written", 1: "a Slurm query failed (the file says so: exporter_ok 0)"},
    )
    cache = cliutil.add_command(
        group,
        "cache",
        _cmd_cache,
        help="read the Alluxio master and worker on this host (loopback); write megahour_cache.prom",
        exits={0: "written", 1: "a daemon this host runs did not answer (the file says so: exporter_ok 0)"},
    )
    cache.add_argument(
        "--master", metavar="URL", help="this host's Alluxio master web address, e.g. http://127.0.0.1:19999"
    )
    cache.add_argument(
        "--worker", metavar="URL", help="this host's Alluxio worker web address, e.g. http://127.0.0.1:30000"
    )
    cache.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for each daemon")
    ingest = cliutil.add_command(
        group,
        "ingest",
        _cmd_ingest,
        help="read the ingest runs' summaries (episodes, hours, failed steps); write megahour_ingest.prom",
        exits={0: "written", 1: "the runs directory or a summary could not be read (the file says so)"},
    )
    ingest.add_argument(
        "--statsd-exporter",
        metavar="URL",
        default=None,
        help=f"relay Airflow's airflow_* series from this statsd_exporter (default ${STATSD_EXPORTER_ENV})",
    )
    ingest.add_argument(
        "--config",
        default=None,
        help="the ingest settings (default $MEGAHOUR_INGEST_CONFIG or /etc/megahour/ingest.yml)",
    )
    warehouse = cliutil.add_command(
        group,
        "warehouse",
        _cmd_warehouse,
        help="ask the warehouse for rows per table, counters, query latency; write megahour_warehouse.prom",
        exits={0: "written", 1: "a warehouse query failed (the file says so: exporter_ok 0)"},
    )
    warehouse.add_argument(
        "--warehouse",
        metavar="URL",
        default=None,
        help="http://HOST:8123 or chdb:PATH (default $MEGAHOUR_WAREHOUSE or /etc/megahour/warehouse.yml)",
    )
    for p in (gpu, slurm, cache, ingest, warehouse):
        p.add_argument(
            "--textfile-dir", default=None, help=f"where to write (default {DEFAULT_TEXTFILE_DIR})"
        )
        p.add_argument(
            "--stdout", action="store_true", help="print the exposition text instead of writing it"
        )
        cliutil.add_json_flag(p)


def _cmd_gpu(args: argparse.Namespace, console: Console) -> int:
    from megahour.exporters import gpu
    from megahour.health import kernel_log
    from megahour.health.config import load
    from megahour.health.probes import ProbeError, run
    from megahour.nvidia import smi_report, telemetry

    config = load(Path(args.config))
    problems: list[str] = []
    report = None
    try:
        report = telemetry.parse(run([config.nvidia_smi, "-q"], config.probe_timeout_s))
    except (ProbeError, smi_report.SmiReportError, OSError) as exc:
        problems.append(f"nvidia-smi -q: {exc}")
    xids: list[kernel_log.XidEvent] = []
    kernel_ok = True
    try:
        xids = kernel_log.parse(run(list(config.kernel_log_command), config.probe_timeout_s).splitlines())
    except (ProbeError, OSError) as exc:
        kernel_ok = False
        problems.append(f"kernel log: {exc}")
    families = gpu.families(report, xids, now=time.time(), kernel_log_ok=kernel_ok)
    directory = args.textfile_dir or config.metrics_dir or DEFAULT_TEXTFILE_DIR
    summary = {"gpus": 0 if report is None else len(report.gpus), "xid_events": len(xids)}
    return _finish(args, console, gpu.TEXTFILE_NAME, directory, families, problems, summary)


def _cmd_slurm(args: argparse.Namespace, console: Console) -> int:
    from megahour.exporters import slurm
    from megahour.slurm.client import SlurmClient

    got = slurm.collect(SlurmClient(), time.time())
    directory = args.textfile_dir or DEFAULT_TEXTFILE_DIR
    return _finish(
        args,
        console,
        slurm.TEXTFILE_NAME,
        directory,
        got.families,
        got.problems,
        got.counts,
        failed=got.failed,
    )


def _cmd_cache(args: argparse.Namespace, console: Console) -> int:
    import json
    import urllib.error
    import urllib.request

    from megahour.exporters import cache

    expected = tuple(daemon for daemon in ("master", "worker") if getattr(args, daemon))
    if not expected:
        raise cliutil.CommandError("name the daemons this host runs: --master URL, --worker URL, or both")
    answers: dict[str, dict | None] = {"master": None, "worker": None}
    problems: list[str] = []
    for daemon in expected:
        url = getattr(args, daemon).rstrip("/") + "/metrics/json/"
        try:
            with urllib.request.urlopen(url, timeout=args.timeout) as response:
                answers[daemon] = dict(cache.check(json.load(response), daemon))
        # refused, closed, timed out, HTTP errors, not JSON, not Alluxio's
        except (OSError, ValueError) as exc:
            if daemon == "master" and cache.is_standby_answer(exc):
                # With several masters only the leader serves its web port: a standby refuses the
                # connection or closes it unanswered. A leader that is gone shows as no master leading
                # (MegahourCacheNoLeader), not here.
                answers[daemon] = dict(cache.STANDBY)
            else:
                problems.append(f"{daemon} {url}: {exc}")
    families = cache.families(answers["master"], answers["worker"], now=time.time(), expected=expected)
    summary = {daemon: int(answers[daemon] is not None) for daemon in expected}
    directory = args.textfile_dir or DEFAULT_TEXTFILE_DIR
    return _finish(args, console, cache.TEXTFILE_NAME, directory, families, problems, summary)


def _cmd_ingest(args: argparse.Namespace, console: Console) -> int:
    import os
    import urllib.request

    from megahour.exporters import ingest
    from megahour.ingest.config import IngestConfigError, load_config
    from megahour.metrics.textfile import Family

    try:
        runs_dir = load_config(args.config).runs
    except (IngestConfigError, OSError) as exc:
        raise cliutil.CommandError(f"ingest settings: {exc}") from None
    reading = ingest.read_runs(runs_dir)
    problems = [reading.problem] if reading.problem else []
    problems += [f"summary skipped: {s}" for s in reading.skipped]
    families = ingest.families(reading, now=time.time())
    summary: dict[str, int | None] = dict(ingest.summary(reading))
    extra = ""
    url = args.statsd_exporter or os.environ.get(STATSD_EXPORTER_ENV)
    if url:
        relayed = False
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                extra, summary["airflow_samples"] = ingest.relay(response.read().decode())
            relayed = True
        except (OSError, ValueError) as exc:
            problems.append(f"Airflow's series from statsd_exporter {url}: {exc}")
        families.append(
            Family(
                "megahour_ingest_statsd_relay_ok", "1 when Airflow's series were read from statsd_exporter."
            ).add(int(relayed))
        )
    directory = args.textfile_dir or DEFAULT_TEXTFILE_DIR
    return _finish(args, console, ingest.TEXTFILE_NAME, directory, families, problems, summary, extra=extra)


def _cmd_warehouse(args: argparse.Namespace, console: Console) -> int:
    from megahour.curation.errors import CurationError
    from megahour.curation.warehouse import open_warehouse
    from megahour.exporters import warehouse

    try:
        client = open_warehouse(args.warehouse)
    except CurationError as exc:
        raise cliutil.CommandError(str(exc)) from None
    try:
        reading = warehouse.collect(client)
    finally:
        client.close()
    families = warehouse.families(reading, now=time.time())
    directory = args.textfile_dir or DEFAULT_TEXTFILE_DIR
    return _finish(
        args,
        console,
        warehouse.TEXTFILE_NAME,
        directory,
        families,
        reading.problems,
        warehouse.summary(reading),
    )


def _finish(
    args: argparse.Namespace,
    console: Console,
    name: str,
    directory: str,
    families: list[Family],
    problems: list[str],
    summary: dict[str, int | None],
    *,
    failed: bool | None = None,
    extra: str = "",
) -> int:
    from megahour.metrics import textfile

    failed = bool(problems) if failed is None else failed
    for problem in problems:
        print(f"megahour metrics {args.sub}: {problem}", file=sys.stderr)
    series = sum(len(f.samples) for f in families)
    if args.stdout:
        sys.stdout.write(textfile.render(families) + extra)
        return 1 if failed else 0
    path = textfile.write(directory, name, families, extra)
    result = {"path": str(path), "ok": not failed, "series": series, **summary, "problems": problems}
    details = ", ".join(f"{k} {v}" for k, v in summary.items())
    cliutil.emit(
        args,
        console,
        result,
        f"wrote {path}: {series} series ({details}){'' if not failed else '; see errors above'}",
    )
    return 1 if failed else 0
