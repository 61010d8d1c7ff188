from __future__ import annotations

import argparse
import sys

import pytest

from megahour.run.cli import configure_parser, run_command


def _parse(argv: list[str]) -> argparse.Namespace:
    # Mounted the way the top-level `megahour` parser mounts subcommands.
    parser = argparse.ArgumentParser(prog="megahour")
    sub = parser.add_subparsers(dest="command", required=True)
    configure_parser(sub.add_parser("run"))
    return parser.parse_args(["run", *argv])


def test_defaults():
    args = _parse(["--", "python", "train.py"])
    assert (args.max_restarts, args.requeue_exit, args.app_error_exit) == (3, 85, 86)
    assert (args.trace_root, args.checkpoint_dir) == (None, None)
    assert args.command == "run"  # the subcommand name is not clobbered by the step


def test_the_step_keeps_its_own_flags():
    args = _parse(["--max-restarts", "1", "--", "python", "train.py", "--max-restarts", "9", "--", "x"])
    assert args.max_restarts == 1
    assert args.step_argv[1:] == ["python", "train.py", "--max-restarts", "9", "--", "x"]


@pytest.mark.parametrize("argv", [[], ["--"], ["--max-restarts", "2", "--"]])
def test_missing_command_names_the_fix(argv, capsys):
    assert run_command(_parse(argv)) == 2
    assert "megahour run -- python train.py" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--max-restarts", "-1"], "--max-restarts=-1"),
        (["--requeue-exit", "86"], "pass two different codes"),
        (["--requeue-exit", "0"], "--requeue-exit=0"),
    ],
)
def test_bad_options_exit_2_before_running_anything(argv, needle, capsys, tmp_path):
    marker = tmp_path / "ran"
    args = _parse([*argv, "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"])
    assert run_command(args) == 2
    assert needle in capsys.readouterr().err
    assert not marker.exists()


def test_runs_the_step_with_flags_and_environment(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("MEGAHOUR_TRACE_ROOT", str(tmp_path / "from-env"))
    args = _parse(["--app-error-exit", "99", "--", sys.executable, "-c", "import sys; sys.exit(4)"])
    assert run_command(args) == 99
    assert (tmp_path / "from-env" / "77" / "attempt-0" / "meta.json").is_file()
    assert "megahour run: app_error:" in capfd.readouterr().err
