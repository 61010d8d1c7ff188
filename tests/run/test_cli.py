from __future__ import annotations

import argparse
import re
import sys

import pytest

import megahour.run.cli as run_cli
from megahour import cliutil
from megahour.cli import build_parser


def _parse(argv: list[str]) -> argparse.Namespace:
    # Mounted by the top-level `megahour` parser, as `megahour run ...` is.
    return build_parser().parse_args(["run", *argv])


def run_command(args: argparse.Namespace) -> int:
    return cliutil.dispatch(args)


def test_defaults():
    args = _parse(["--", "python", "train.py"])
    assert (args.max_restarts, args.requeue_exit, args.app_error_exit) == (3, 85, 86)
    assert (args.trace_root, args.checkpoint_dir) == (None, None)
    assert args.command == "run"  # the subcommand name is not clobbered by the step
    assert args.func.__module__ == run_cli.__name__


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


def test_help_lists_the_exit_codes_slurm_acts_on(capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit):
        _parse(["--help"])
    out = capsys.readouterr().out
    epilog = out.split("exit codes:\n", 1)[1]
    entries = {
        m[1]: " ".join(m[2].split()) for m in re.finditer(r"^  (\d+) +(.*?)(?=^  \d|\Z)", epilog, re.M | re.S)
    }
    assert "the step succeeded" in entries["0"] and "usage error" in entries["2"]
    assert "Slurm requeues the job" in entries["85"] and "application error" in entries["86"]
    assert "Ctrl-C" in entries["130"]
    assert "(default: 85)" in out and "(default: 86)" in out and "(default: 3)" in out
