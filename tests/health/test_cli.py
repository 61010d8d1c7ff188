"""`megahour health ...`: the suite is a closed set; a bad config is one line (and the hooks fail closed)."""

from __future__ import annotations

import pytest

from megahour.cli import main


def test_suite_is_a_closed_set(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["health", "check", "--suite", "fast"])
    assert exc.value.code == 2
    assert "invalid choice: 'fast'" in capsys.readouterr().err


def test_a_missing_config_is_one_line(tmp_path, capsys) -> None:
    assert main(["health", "check", "--config", str(tmp_path / "health.json")]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {tmp_path / 'health.json'}")


@pytest.mark.parametrize("hook", ["prolog", "epilog"])
def test_hooks_fail_closed_with_one_line(hook, tmp_path, capsys) -> None:
    assert main(["health", hook, "--config", str(tmp_path / "health.json")]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"megahour health {hook}: ")
