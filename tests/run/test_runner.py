"""The runner with real child processes (``sys.executable -c``); each test takes well under a few seconds."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from megahour.run.runner import RunConfig, run

REPO = Path(__file__).resolve().parents[2]


def _py(code: str, *args: str) -> tuple[str, ...]:
    return (sys.executable, "-c", textwrap.dedent(code), *args)


def _attempts(trace_root: Path, job: str = "4242") -> list[dict]:
    job_dir = trace_root / job
    dirs = sorted(job_dir.iterdir(), key=lambda p: p.name)
    assert all(d.name.startswith("attempt-") for d in dirs), f"leftover temporary dirs: {dirs}"
    names = sorted((d.name for d in dirs), key=lambda n: int(n.split("-")[1]))
    return [json.loads((job_dir / n / "meta.json").read_text()) for n in names]


@pytest.fixture
def env(tmp_path):
    return {**os.environ, "SLURM_JOB_ID": "4242", "SLURM_RESTART_COUNT": "1", "HF_TOKEN": "hf_very_secret"}


def _run(tmp_path, env, command, **config):
    logs: list[str] = []
    sink = io.BytesIO()
    code = run(
        RunConfig(command=command, trace_root=tmp_path / "traces", **config),
        env=env,
        sink=sink,
        log=logs.append,
    )
    return code, sink.getvalue().decode(), logs


KILLED_ONCE = """
    import os, pathlib, sys
    marker = pathlib.Path(sys.argv[1])
    print("attempt starting", flush=True)
    if not marker.exists():
        marker.touch()
        os.kill(os.getpid(), 9)  # what the OOM killer does
    print("done")
"""


def test_transient_failure_restarts_in_place_then_succeeds(tmp_path, env):
    code, output, logs = _run(tmp_path, env, _py(KILLED_ONCE, str(tmp_path / "marker")), max_restarts=3)
    assert code == 0
    assert output.count("attempt starting") == 2 and output.endswith("done\n")
    first, second = _attempts(tmp_path / "traces")
    assert (first["attempt"], first["returncode"], first["classification"]) == (0, -9, "transient")
    assert first["decision"]["action"] == "restart"
    assert (second["attempt"], second["returncode"], second["decision"]["action"]) == (1, 0, "exit_success")
    assert (first["local_restart"], second["local_restart"]) == (0, 1)
    assert first["slurm_restart_count"] == second["slurm_restart_count"] == 1
    assert [line.split(":")[0] for line in logs] == ["restart", "exit_success"]
    tail = (tmp_path / "traces" / "4242" / "attempt-1" / "log-tail.txt").read_text()
    assert tail == "attempt starting\ndone\n"


def test_secrets_are_redacted_in_env_json(tmp_path, env):
    _run(tmp_path, env, _py("pass"))
    env_json = (tmp_path / "traces" / "4242" / "attempt-0" / "env.json").read_text()
    assert "hf_very_secret" not in env_json
    assert json.loads(env_json)["HF_TOKEN"] == "<redacted>"
    assert json.loads(env_json)["SLURM_JOB_ID"] == "4242"


def test_application_error_exits_86_after_one_attempt(tmp_path, env):
    code, output, _ = _run(
        tmp_path, env, _py("import sys; print('bad config', file=sys.stderr); sys.exit(3)")
    )
    assert code == 86
    assert "bad config" in output  # stderr is teed too
    (only,) = _attempts(tmp_path / "traces")
    assert (only["returncode"], only["classification"], only["decision"]["action"]) == (
        3,
        "app_error",
        "app_error",
    )


def test_always_killed_restarts_max_restarts_times_then_exits_85(tmp_path, env):
    code, _, logs = _run(tmp_path, env, _py("import os; os.kill(os.getpid(), 9)"), max_restarts=2)
    assert code == 85
    attempts = _attempts(tmp_path / "traces")
    assert [a["attempt"] for a in attempts] == [0, 1, 2]
    assert [a["decision"]["action"] for a in attempts] == ["restart", "restart", "requeue"]
    assert all(a["returncode"] == -9 for a in attempts)
    assert logs[-1].startswith("requeue:")


def test_each_new_checkpoint_resets_the_budget(tmp_path, env):
    # Every attempt saves a checkpoint and is then killed; the fifth succeeds. One restart of
    # budget is enough because each death comes after progress.
    code_ = """
        import os, pathlib, sys
        ckpts = pathlib.Path(sys.argv[1])
        ckpts.mkdir(exist_ok=True)
        done = len(list(ckpts.iterdir()))
        if done == 4:
            sys.exit(0)
        step = ckpts / f"step-{done}"
        step.mkdir()
        (step / ".complete").touch()
        os.utime(step / ".complete", ns=(done * 10**9 + 10**18, done * 10**9 + 10**18))
        os.kill(os.getpid(), 9)
    """
    ckpts = tmp_path / "ckpts"
    code, _, _ = _run(tmp_path, env, _py(code_, str(ckpts)), max_restarts=1, checkpoint_dir=ckpts)
    assert code == 0
    attempts = _attempts(tmp_path / "traces")
    assert len(attempts) == 5
    assert [a["decision"]["restarts_used"] for a in attempts[:4]] == [1, 1, 1, 1]
    assert attempts[3]["checkpoint"].startswith("step-3@")


def test_without_progress_the_same_setup_requeues(tmp_path, env):
    ckpts = tmp_path / "ckpts"
    (ckpts / "step-0").mkdir(parents=True)
    (ckpts / "step-0" / ".complete").touch()  # from an earlier Slurm attempt: not progress
    code, _, _ = _run(
        tmp_path, env, _py("import os; os.kill(os.getpid(), 9)"), max_restarts=1, checkpoint_dir=ckpts
    )
    assert code == 85
    assert len(_attempts(tmp_path / "traces")) == 2


def test_a_command_that_cannot_start_is_an_application_error(tmp_path, env):
    code, output, _ = _run(tmp_path, env, (str(tmp_path / "no-such-binary"),))
    assert code == 86
    assert "cannot start" in output
    (only,) = _attempts(tmp_path / "traces")
    assert only["returncode"] == 127


def test_unwritable_trace_root_still_follows_the_policy(tmp_path, env):
    blocker = tmp_path / "traces"
    blocker.write_text("a file where the trace root should be")
    code, _, logs = _run(tmp_path, env, _py("import sys; sys.exit(3)"))
    assert code == 86
    assert any(line.startswith("warning: could not write the attempt trace") for line in logs)


def test_a_leftover_background_process_does_not_hang_the_wrapper(tmp_path, env):
    pidfile = tmp_path / "bg.pid"
    code_ = """
        import subprocess, sys
        bg = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # inherits our stdout
        open(sys.argv[1], "w").write(str(bg.pid))
        print("leaving a sleeper behind", flush=True)
    """
    started = time.monotonic()
    try:
        code, output, _ = _run(tmp_path, env, _py(code_, str(pidfile)))
    finally:
        if pidfile.exists():
            os.kill(int(pidfile.read_text()), signal.SIGKILL)
    assert code == 0
    assert "leaving a sleeper behind" in output
    assert time.monotonic() - started < 15


# --- signals: the wrapper runs in its own process so the test can signal it ----------------

TRAPS_SIGNALS = """
    import pathlib, signal, sys, time
    out = pathlib.Path(sys.argv[1])
    def handler(signum, frame):
        out.write_text(signal.Signals(signum).name)
        sys.exit(0)  # a clean exit after saving: the job is still unfinished
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    print("ready", flush=True)
    time.sleep(30)
    sys.exit(5)
"""


def _wrapper(tmp_path: Path, env: dict, command: tuple[str, ...]) -> subprocess.Popen[str]:
    driver = (
        "import sys; from pathlib import Path; from megahour.run.runner import RunConfig, run; "
        f"sys.exit(run(RunConfig(command={command!r}, trace_root=Path({str(tmp_path / 'traces')!r}), "
        "max_restarts=3)))"
    )
    return subprocess.Popen(
        [sys.executable, "-c", driver], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.mark.parametrize(
    "signum,expected_code,expected_action",
    [(signal.SIGTERM, 85, "requeue"), (signal.SIGINT, 130, "interrupted")],
)
def test_stop_signals_are_forwarded_and_never_restart(tmp_path, env, signum, expected_code, expected_action):
    got = tmp_path / "child-got"
    wrapper = _wrapper(tmp_path, env, _py(TRAPS_SIGNALS, str(got)))
    try:
        assert wrapper.stdout.readline() == "ready\n"
        wrapper.send_signal(signum)
        _, stderr = wrapper.communicate(timeout=20)
    finally:
        if wrapper.poll() is None:
            wrapper.kill()
    assert wrapper.returncode == expected_code, stderr
    assert got.read_text() == signal.Signals(signum).name
    (only,) = _attempts(tmp_path / "traces")
    assert (only["returncode"], only["signal"]) == (0, signal.Signals(signum).name)
    assert only["decision"]["action"] == expected_action
    assert f"megahour run: {expected_action}:" in stderr


def test_each_attempt_is_told_its_restart_and_an_unfit_allocation_requeues(tmp_path, env):
    """Killed twice: the first restart is in place; before the second, the allocation is unfit (a node
    was drained), so the job is handed back to Slurm instead."""
    seen = tmp_path / "seen"
    step = _py(
        """
        import os, pathlib, sys
        with open(sys.argv[1], "a") as f:
            f.write(os.environ["MEGAHOUR_RUN_RESTART"] + "\\n")
        os.kill(os.getpid(), 9)
        """,
        str(seen),
    )
    answers = iter([None, "node gpu-2 is drng (megahour:xid_reset_gpu)"])
    code, _, logs = _run(tmp_path, env, step, max_restarts=5, allocation_check=lambda: next(answers))
    assert code == 85
    assert seen.read_text().split() == ["0", "1"]
    attempts = _attempts(tmp_path / "traces")
    assert [a["decision"]["action"] for a in attempts] == ["restart", "requeue"]
    assert "gpu-2 is drng" in attempts[1]["decision"]["reason"]
    assert logs[-1].startswith("requeue: node gpu-2 is drng")


def test_a_clean_exit_never_asks_about_the_allocation(tmp_path, env):
    def unreachable():  # pragma: no cover - must not be called
        raise AssertionError("asked about the allocation without a restart to decide")

    code, _, _ = _run(tmp_path, env, _py("pass"), allocation_check=unreachable)
    assert code == 0
