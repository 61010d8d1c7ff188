#!/usr/bin/env python3
"""How long `make up` takes from nothing, on a warm image cache, and what the control node installs.

Full run (about 10 minutes here):
  control node: a venv from nothing (empty pip cache) with what `make up` installs (the `deploy`
        extra) beside the baseline, what it installed before the split and `make test` still adds
        (the `dev` extra: torch's CUDA build, chDB, the simulators, the test stack); time and size;
  cold: from nothing: a new venv, an empty pip cache and wheelhouse cache, megahour's images and the
        cluster removed, then `make up` (venv, debootstrap, image build, containers, site.yml with
        every package install, smoke test);
  warm: `make down`, then `make up` again with the venv and the images kept.
--quick (under 2 minutes): the control node's venv from nothing (the baseline's size read from the
  repo's .venv when `make test` has filled it), then `megahour cluster up` on a warm image cache,
  the part of `make up` the image cache decides.

The targets are the issues' (15 min from nothing, 6 min warm); ratios below 1 beat them. The
scratch venvs and caches live under .cache/bench-deploy and are removed at the end; the cluster is
left down, as `make down` leaves it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGETS_S = {"cold": 15 * 60, "warm": 6 * 60}
IMAGE_REPOS = ("localhost/megahour-base", "localhost/megahour-node")
SCRATCH = REPO / ".cache" / "bench-deploy"
# Relative to the repo, as the Makefile's VENV must be.
COLD_VENV = ".cache/bench-deploy/venv-make-up"


def sh(args: list[str], *, quiet: bool = False, env: dict[str, str] | None = None) -> None:
    out = subprocess.DEVNULL if quiet else None
    proc = subprocess.run(
        args, cwd=REPO, stdout=out, stderr=subprocess.STDOUT if quiet else None, check=False, env=env
    )
    if proc.returncode != 0:
        sys.exit(f"benchmark step failed (exit {proc.returncode}): {' '.join(args)}")


def timed(label: str, args: list[str], *, env: dict[str, str] | None = None) -> float:
    print(f"==> {label}: {' '.join(args)}", flush=True)
    started = time.monotonic()
    sh(args, env=env)  # streamed: `make up` prints its own progress
    elapsed = time.monotonic() - started
    print(f"    {label}: {elapsed:.1f} s", flush=True)
    return elapsed


def disk_mb(path: Path) -> float:
    """What a tree takes on disk (allocated blocks, links not followed), in MB."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total / 1e6


def empty_pip_cache(name: str) -> dict[str, str]:
    """An environment whose pip starts from an empty cache and no local wheel directory: from nothing."""
    cache = SCRATCH / name
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True)
    env = dict(os.environ, PIP_CACHE_DIR=str(cache))
    env.pop("PIP_FIND_LINKS", None)
    return env


def venv_from_nothing(label: str, extra: str, venv: Path) -> tuple[float, float]:
    """A new venv with megahour[extra] installed from an empty pip cache: seconds, MB on disk."""
    shutil.rmtree(venv, ignore_errors=True)
    env = empty_pip_cache(f"pip-cache-{extra}")
    pip = str(venv / "bin" / "pip")
    started = time.monotonic()
    print(f"==> {label}: venv + pip install -e '.[{extra}]' from an empty pip cache", flush=True)
    sh([sys.executable, "-m", "venv", str(venv)], env=env)
    sh([pip, "install", "-q", "--upgrade", "pip"], env=env)
    sh([pip, "install", "-q", "-e", f".[{extra}]"], env=env)
    elapsed = time.monotonic() - started
    size = disk_mb(venv)
    print(f"    {label}: {elapsed:.1f} s, {size:.0f} MB", flush=True)
    return elapsed, size


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
    parser.add_argument(
        "--quick", action="store_true", help="the control node's venv, then containers on a warm image cache"
    )
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    os.environ["PATH"] = f"{REPO / '.venv' / 'bin'}:{os.environ['PATH']}"

    figures: dict[str, float] = {}
    SCRATCH.mkdir(parents=True, exist_ok=True)
    light_s, light_mb = venv_from_nothing("control node (deploy extra)", "deploy", SCRATCH / "venv-deploy")
    figures["deploy_venv_s"], figures["deploy_venv_mb"] = light_s, light_mb
    shutil.rmtree(SCRATCH / "venv-deploy", ignore_errors=True)
    if args.quick:
        repo_venv = REPO / ".venv"
        if (repo_venv / ".installed-dev").exists():
            figures["dev_venv_mb"] = disk_mb(repo_venv)
        sh(["make", "--no-print-directory", "image"], quiet=True)  # warm the cache first
        sh(["megahour", "cluster", "down"], quiet=True)
        figures["warm_cluster_up_s"] = timed("warm cluster up (no deploy)", ["megahour", "cluster", "up"])
        sh(["megahour", "cluster", "down"], quiet=True)
        rows = [("warm cluster up (containers only)", figures["warm_cluster_up_s"], TARGETS_S["warm"])]
    else:
        dev_s, dev_mb = venv_from_nothing("baseline (dev extra)", "dev", SCRATCH / "venv-dev")
        figures["dev_venv_s"], figures["dev_venv_mb"] = dev_s, dev_mb
        shutil.rmtree(SCRATCH / "venv-dev", ignore_errors=True)

        sh(["make", "--no-print-directory", "down"], quiet=True)
        remove_images()
        shutil.rmtree(REPO / COLD_VENV, ignore_errors=True)
        wheelhouse = SCRATCH / "wheelhouse"
        shutil.rmtree(wheelhouse, ignore_errors=True)
        make_up = [
            "make",
            "--no-print-directory",
            "up",
            f"VENV={COLD_VENV}",
            f"DEPLOY_VARS=-e runtime_wheelhouse_cache={wheelhouse}",
        ]
        cold_env = empty_pip_cache("pip-cache-make-up")
        figures["cold_make_up_s"] = timed("cold make up, from nothing", make_up, env=cold_env)
        sh(["make", "--no-print-directory", "down", f"VENV={COLD_VENV}"], quiet=True)
        figures["warm_make_up_s"] = timed("warm make up", make_up, env=cold_env)
        sh(["make", "--no-print-directory", "down", f"VENV={COLD_VENV}"], quiet=True)
        rows = [
            ("cold make up, from nothing", figures["cold_make_up_s"], TARGETS_S["cold"]),
            ("warm make up", figures["warm_make_up_s"], TARGETS_S["warm"]),
        ]
        figures["cold_ratio_to_target"] = round(figures["cold_make_up_s"] / TARGETS_S["cold"], 3)
        figures["warm_ratio_to_target"] = round(figures["warm_make_up_s"] / TARGETS_S["warm"], 3)
        figures["dev_to_deploy_venv_time_ratio"] = round(dev_s / light_s, 2)
    if "dev_venv_mb" in figures:
        figures["dev_to_deploy_venv_size_ratio"] = round(figures["dev_venv_mb"] / light_mb, 2)
    shutil.rmtree(SCRATCH, ignore_errors=True)
    figures["cold_target_s"] = TARGETS_S["cold"]
    figures["warm_target_s"] = TARGETS_S["warm"]

    print(f"\n{'control node venv':38} {'ours: deploy':>13} {'baseline: dev':>14} {'baseline/ours':>13}")
    dev_s_text = f"{figures['dev_venv_s']:.1f}" if "dev_venv_s" in figures else "-"
    time_ratio = f"{figures['dev_venv_s'] / light_s:.2f}" if "dev_venv_s" in figures else "-"
    print(f"{'from nothing (s)':38} {light_s:13.1f} {dev_s_text:>14} {time_ratio:>13}")
    if "dev_venv_mb" in figures:
        dev_mb_text = f"{figures['dev_venv_mb']:.0f}"
        size_ratio = f"{figures['dev_to_deploy_venv_size_ratio']:.2f}"
    else:
        dev_mb_text = size_ratio = "-"
    print(f"{'on disk (MB)':38} {light_mb:13.0f} {dev_mb_text:>14} {size_ratio:>13}")
    print(f"\n{'measure':38} {'ours (s)':>9} {'target (s)':>10} {'ours/target':>11}")
    for label, ours, target in rows:
        print(f"{label:38} {ours:9.1f} {target:10d} {ours / target:11.3f}")
    result = {
        "benchmark": "deploy",
        "mode": "quick" if args.quick else "full",
        "commit": commit(),
        "figures": {k: round(v, 1) if k.endswith(("_s", "_mb")) else v for k, v in figures.items()},
    }
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.json.with_suffix(".tmp")
        tmp.write_text(json.dumps(result, indent=2) + "\n")
        tmp.replace(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
