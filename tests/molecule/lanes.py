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
import re
import signal
import subprocess
import sys
import threading
import time

from tests.conftest import BIN, REPO

DEFAULT_LANES = ("cluster", "faults or warehouse")

# A failed lane's cause is printed again after the verdicts: CI keeps only the last ~1.5 KB of a run's
# output, and a lane's fatal task is hundreds of lines above that.
RECAP_CHARS = 1200
RECAP_TAIL_LINES = 6
_FATAL = re.compile(r"(fatal|failed): \[")


def _bare(line: str) -> str:
    """A lane's line without test_scenarios' "  molecule <scenario> |  <t> s | " prefix or the "E  ..." of
    pytest's failure report (which repeats molecule's last lines), indentation past those kept."""
    line = line.rstrip("\n")
    if line.lstrip().startswith("molecule ") and line.count(" | ") >= 2:
        return line.split(" | ", 2)[2]
    return re.sub(r"^E {7}(  )?", "", line)


def failure_recap(lines: list[str]) -> list[str]:
    """The lines that say why a lane failed, RECAP_CHARS at most: the last Ansible ``fatal:``/``failed:``
    line not followed by ``...ignoring``, the ``TASK [...]`` header above it and the indented result below
    it (from its ``msg:`` on, where it has one; the YAML result callback, ansible.cfg); without one (an
    image build, pytest itself), the lane's last RECAP_TAIL_LINES lines."""
    bare = [_bare(line) for line in lines]
    for index in range(len(bare) - 1, -1, -1):
        if not _FATAL.match(bare[index].strip()):
            continue
        below = []
        for later in bare[index + 1 :]:
            if later.strip() and not later.startswith(" "):
                break
            below.append(later.rstrip())
        after = next((later.strip() for later in bare[index + 1 + len(below) :] if later.strip()), "")
        if after.endswith("...ignoring"):
            continue
        msg = next((n for n, text in enumerate(below) if text.strip().startswith("msg:")), 0)
        task = next(
            (earlier.strip() for earlier in reversed(bare[:index]) if earlier.startswith("TASK [")), ""
        )
        chosen = [text for text in (task, bare[index].strip(), *below[msg:]) if text.strip()]
        break
    else:
        chosen = [text.rstrip() for text in bare[-RECAP_TAIL_LINES:]]
    recap, room = [], RECAP_CHARS
    for text in chosen:
        if room <= 0:
            break
        recap.append(text[:room])
        room -= len(text) + 1
    return recap


def _stream(name: str, proc: subprocess.Popen, lock: threading.Lock, started: float, ended: dict) -> None:
    # A lane prints little (molecule's stage lines, and pytest's report of a failure): all of it is kept.
    printed = []
    for line in proc.stdout:
        with lock:
            sys.stdout.write(f"[{name}] {line}")
            sys.stdout.flush()
        printed.append(line)
    rc = proc.wait()
    ended[name] = (rc, time.monotonic() - started, failure_recap(printed))


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
        rc, seconds, _ = ended[lane]
        verdict = "passed" if rc == 0 else f"failed (exit {rc})"
        print(f"  lane '{lane}': {verdict} after {seconds:.0f} s", flush=True)
    for lane in lanes:
        rc, _, recap = ended[lane]
        if rc != 0:
            why = "its last fatal task not ignored, or its last lines"
            print(f"==> why lane '{lane}' failed ({why}):", flush=True)
            for line in recap:
                print(f"  {line}", flush=True)
    return next((ended[lane][0] for lane in lanes if ended[lane][0] != 0), 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lanes", nargs="*", default=list(DEFAULT_LANES), help="a pytest -k expression a lane")
    args, pytest_args = parser.parse_known_args(argv)
    return run_lanes(args.lanes, pytest_args)


if __name__ == "__main__":
    sys.exit(main())
