"""Run the molecule scenarios in lanes at once: ``python -m tests.molecule.lanes [LANE ...]``.

A lane is a pytest ``-k`` expression (``cluster``, ``faults or warehouse``); each runs as one
``pytest -m molecule -k LANE`` process, its scenarios one after the other, and the lanes side by side.
The node images every scenario needs are built first, once, so no two lanes build the same image.
Every line a lane prints is prefixed with the lane's name; the lanes' wall times close the output, and
the exit status is the first failed lane's (in the order given).

Why lanes: the scenarios are CPU-bound while they deploy and mostly wait while they inject faults and
wait for jobs, takeovers and dwell times, so one scenario's deploys fill the other's waits. Measured in
docs/local-cluster.md ("What make test runs").
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time

from tests.conftest import BIN, REPO

DEFAULT_LANES = ("cluster", "faults or warehouse")


def _build_images(env: dict) -> int:
    """Build the node images of every scenario (each scenario's test checks its own again, cached): two
    lanes then never build one tag at once. Imported late: the module reads every molecule.yml."""
    from tests.molecule.test_scenarios import SCENARIOS, image_suites

    for suite in sorted({suite for scenario in SCENARIOS for suite in image_suites(scenario)}):
        print(f"==> megahour cluster image --suite {suite}", flush=True)
        command = [str(BIN / "megahour"), "cluster", "image", "--suite", suite]
        built = subprocess.run(command, cwd=REPO, env=env, check=False)
        if built.returncode != 0:
            print(f"error: the {suite} node image did not build (above); no scenario ran", file=sys.stderr)
            return built.returncode
    return 0


def _stream(name: str, proc: subprocess.Popen, lock: threading.Lock, started: float, ended: dict) -> None:
    for line in proc.stdout:
        with lock:
            sys.stdout.write(f"[{name}] {line}")
            sys.stdout.flush()
    ended[name] = (proc.wait(), time.monotonic() - started)


def run_lanes(lanes: list[str], pytest_args: list[str]) -> int:
    env = dict(os.environ, PATH=f"{BIN}:{os.environ.get('PATH', '')}")
    if rc := _build_images(env):
        return rc
    lock = threading.Lock()
    started = time.monotonic()
    procs, threads, ended = [], [], {}
    for lane in lanes:
        # No cache provider: two processes would write .pytest_cache's last-failed list over each other.
        command = [str(BIN / "pytest"), "-m", "molecule", "-k", lane, "-p", "no:cacheprovider", *pytest_args]
        print(f"==> lane '{lane}': {' '.join(command[1:])}", flush=True)
        proc = subprocess.Popen(
            command, cwd=REPO, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, bufsize=1
        )
        thread = threading.Thread(target=_stream, args=(lane, proc, lock, started, ended), daemon=True)
        thread.start()
        procs.append((lane, proc))
        threads.append(thread)

    def _stop(signum, _frame):
        for _, proc in procs:
            proc.send_signal(signum)

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    for thread in threads:
        thread.join()
    print("==> molecule lanes", flush=True)
    for lane in lanes:
        rc, seconds = ended[lane]
        verdict = "passed" if rc == 0 else f"failed (exit {rc})"
        print(f"  lane '{lane}': {verdict} after {seconds:.0f} s", flush=True)
    return next((ended[lane][0] for lane in lanes if ended[lane][0] != 0), 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lanes", nargs="*", default=list(DEFAULT_LANES), help="a pytest -k expression a lane")
    args, pytest_args = parser.parse_known_args(argv)
    return run_lanes(args.lanes, pytest_args)


if __name__ == "__main__":
    sys.exit(main())
