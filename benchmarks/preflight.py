#!/usr/bin/env python3
"""Latency of megahour's health gates, as Slurm runs them, on a local-cluster node.

Runs the installed Prolog hook (/etc/slurm/megahour-prolog) N times (200; --quick 50)
and the HealthCheckProgram hook 5 times inside a compute container, timing each
process from start to exit, and compares them with their budgets: the Prolog's
p99 must stay under 2 s (no DCGM), the health check well inside Slurm's 60 s kill.
Needs the local cluster deployed (`make up`); it changes nothing there except the
verdict files the hooks write, which it removes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

BUDGET_S = {"prolog_p99": 2.0, "healthcheck": 60.0}

# Runs inside the node: times the hooks exactly as slurmd would start them.
PROBE = r"""
import json, os, statistics, subprocess, sys, time
runs, hc_runs = int(sys.argv[1]), int(sys.argv[2])
env = dict(PATH="/usr/bin:/bin")  # slurmd gives hooks almost no environment
prolog, hc = [], []
for i in range(runs):
    env["SLURM_JOB_ID"] = f"bench-{i}"
    t = time.perf_counter()
    rc = subprocess.run(["/etc/slurm/megahour-prolog"], env=env, capture_output=True).returncode
    prolog.append(time.perf_counter() - t)
    if rc != 0:
        sys.exit(f"prolog failed on run {i}: the node is not healthy; fix it before benchmarking")
    if i % 25 == 0:
        print(f"  prolog run {i}/{runs}", file=sys.stderr, flush=True)
for i in range(hc_runs):
    t = time.perf_counter()
    subprocess.run(["/etc/slurm/megahour-healthcheck"], env=env, capture_output=True)
    hc.append(time.perf_counter() - t)
for name in os.listdir("/var/lib/megahour/health"):
    if name.startswith("prolog-bench-"):
        os.unlink(os.path.join("/var/lib/megahour/health", name))
q = statistics.quantiles(prolog, n=100, method="inclusive")
print(json.dumps({"prolog_p50_s": statistics.median(prolog), "prolog_p99_s": q[98],
                  "prolog_max_s": max(prolog), "prolog_runs": runs,
                  "healthcheck_s": statistics.median(hc), "healthcheck_max_s": max(hc),
                  "healthcheck_runs": hc_runs}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="50 Prolog runs instead of 200 (< 2 min)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--node", default="gpu-1", help="local-cluster container to measure on")
    args = parser.parse_args()
    runs = 50 if args.quick else 200
    print(f"==> {runs} Prolog runs and 5 health checks on {args.node}", flush=True)
    proc = subprocess.run(
        ["podman", "exec", "-i", args.node, "python3", "-", str(runs), "5"],
        input=PROBE,
        text=True,
        stdout=subprocess.PIPE,
        check=False,
    )
    if proc.returncode != 0:
        sys.exit(f"benchmark failed on {args.node} (is the local cluster up? `make up`)")
    figures = json.loads(proc.stdout)
    figures = {k: round(v, 4) if isinstance(v, float) else v for k, v in figures.items()}
    figures["prolog_p99_budget_s"] = BUDGET_S["prolog_p99"]
    figures["healthcheck_budget_s"] = BUDGET_S["healthcheck"]
    figures["prolog_p99_ratio_to_budget"] = round(figures["prolog_p99_s"] / BUDGET_S["prolog_p99"], 3)
    figures["healthcheck_ratio_to_budget"] = round(figures["healthcheck_s"] / BUDGET_S["healthcheck"], 4)
    print(f"\n{'measure':28} {'ours (s)':>9} {'budget (s)':>10} {'ours/budget':>11}")
    print(f"{'prolog p50':28} {figures['prolog_p50_s']:9.3f} {'':>10} {'':>11}")
    print(
        f"{'prolog p99':28} {figures['prolog_p99_s']:9.3f} {BUDGET_S['prolog_p99']:10.1f} "
        f"{figures['prolog_p99_ratio_to_budget']:11.3f}"
    )
    print(
        f"{'healthcheck (median of 5)':28} {figures['healthcheck_s']:9.3f} {BUDGET_S['healthcheck']:10.1f} "
        f"{figures['healthcheck_ratio_to_budget']:11.4f}"
    )
    if args.json:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip()
        args.json.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.json.with_suffix(".tmp")
        tmp.write_text(
            json.dumps(
                {
                    "benchmark": "preflight",
                    "mode": "quick" if args.quick else "full",
                    "commit": commit,
                    "node": args.node,
                    "figures": figures,
                },
                indent=2,
            )
            + "\n"
        )
        tmp.replace(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
