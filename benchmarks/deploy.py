#!/usr/bin/env python3
"""How long `make up` takes on a cold and on a warm image cache, against the targets.

Full run (about 6 minutes here):
  cold: remove megahour's images and the cluster, then `make up` (debootstrap, image
        build, containers, site.yml with every package install, smoke test);
  warm: `make down`, then `make up` again with the images cached.
--quick (under 2 minutes) skips site.yml: it times the image-cache check plus
  container start (`megahour cluster up`) on a warm cache, which is the part of
  `make up` the image cache decides.

The "baseline" is the issue's target (15 min cold, 6 min warm); ratios below 1
beat it. The cluster is left down, as `make down` leaves it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGETS_S = {"cold": 15 * 60, "warm": 6 * 60}
IMAGE_REPOS = ("localhost/megahour-base", "localhost/megahour-node")


def sh(args: list[str], *, quiet: bool = False) -> None:
    out = subprocess.DEVNULL if quiet else None
    proc = subprocess.run(
        args, cwd=REPO, stdout=out, stderr=subprocess.STDOUT if quiet else None, check=False
    )
    if proc.returncode != 0:
        sys.exit(f"benchmark step failed (exit {proc.returncode}): {' '.join(args)}")


def timed(label: str, args: list[str]) -> float:
    print(f"==> {label}: {' '.join(args)}", flush=True)
    started = time.monotonic()
    sh(args)  # streamed: `make up` prints its own progress
    elapsed = time.monotonic() - started
    print(f"    {label}: {elapsed:.1f} s", flush=True)
    return elapsed


def remove_images() -> None:
    listing = subprocess.run(
        ["podman", "images", "--format", "{{.Repository}}:{{.Tag}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    tags = [t for t in listing if t.startswith(IMAGE_REPOS)]
    if tags:
        sh(["podman", "rmi", "--force", *tags], quiet=True)


def commit() -> str:
    proc = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=False
    )
    return proc.stdout.strip() or "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="warm image cache + containers only (< 2 min)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    os.environ["PATH"] = f"{REPO / '.venv' / 'bin'}:{os.environ['PATH']}"

    figures: dict[str, float] = {}
    if args.quick:
        sh(["make", "--no-print-directory", "image"], quiet=True)  # warm the cache first
        sh(["megahour", "cluster", "down"], quiet=True)
        figures["warm_cluster_up_s"] = timed("warm cluster up (no deploy)", ["megahour", "cluster", "up"])
        sh(["megahour", "cluster", "down"], quiet=True)
        rows = [("warm cluster up (containers only)", figures["warm_cluster_up_s"], TARGETS_S["warm"])]
    else:
        sh(["make", "--no-print-directory", "down"], quiet=True)
        remove_images()
        figures["cold_make_up_s"] = timed("cold make up", ["make", "--no-print-directory", "up"])
        sh(["make", "--no-print-directory", "down"], quiet=True)
        figures["warm_make_up_s"] = timed("warm make up", ["make", "--no-print-directory", "up"])
        sh(["make", "--no-print-directory", "down"], quiet=True)
        rows = [
            ("cold make up", figures["cold_make_up_s"], TARGETS_S["cold"]),
            ("warm make up", figures["warm_make_up_s"], TARGETS_S["warm"]),
        ]
        figures["cold_ratio_to_target"] = round(figures["cold_make_up_s"] / TARGETS_S["cold"], 3)
        figures["warm_ratio_to_target"] = round(figures["warm_make_up_s"] / TARGETS_S["warm"], 3)
    figures["cold_target_s"] = TARGETS_S["cold"]
    figures["warm_target_s"] = TARGETS_S["warm"]

    print(f"\n{'measure':38} {'ours (s)':>9} {'target (s)':>10} {'ours/target':>11}")
    for label, ours, target in rows:
        print(f"{label:38} {ours:9.1f} {target:10d} {ours / target:11.3f}")
    result = {
        "benchmark": "deploy",
        "mode": "quick" if args.quick else "full",
        "commit": commit(),
        "figures": {k: round(v, 1) if k.endswith("_s") else v for k, v in figures.items()},
    }
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.json.with_suffix(".tmp")
        tmp.write_text(json.dumps(result, indent=2) + "\n")
        tmp.replace(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
