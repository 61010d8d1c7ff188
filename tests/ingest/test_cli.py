"""`megahour ingest ...`: the step names, the exit codes the DAG reads, one-line errors."""

from __future__ import annotations

import pytest

from megahour.cli import main
from megahour.ingest import work
from megahour.ingest.steps import STEPS


def test_unknown_step_is_a_usage_error_listing_the_steps(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["ingest", "step", "transcoed", "--run-dir", "/r"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'transcoed'" in err and all(step in err for step in STEPS)


@pytest.mark.parametrize("step,code", [("summary", 3), ("transcode", 1)])
def test_a_failed_step_exits_with_the_code_its_help_lists(step, code, monkeypatch, capsys) -> None:
    def fail(*_args, **_kwargs):
        raise work.StepFailed("critical steps failed: transcode-0; see the logs")

    monkeypatch.setattr(work, "execute", fail)
    monkeypatch.setattr("megahour.ingest.config.load_config", lambda _path: None)
    assert main(["ingest", "step", step, "--run-dir", "/r"]) == code
    assert capsys.readouterr().err == "step failed: critical steps failed: transcode-0; see the logs\n"


def test_params_that_are_not_json_are_one_line(monkeypatch, capsys) -> None:
    monkeypatch.setattr("megahour.ingest.config.load_config", lambda _path: None)
    assert main(["ingest", "step", "discover", "--run-dir", "/r", "--params", "{jitter_s: 0}"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --params is not JSON")
