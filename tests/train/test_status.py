"""`megahour train status`: a job's attempts and figures from the logs RunMetrics writes."""

from __future__ import annotations

import json

import pytest

from megahour.cli import main
from megahour.train.metrics import RunMetrics, StepRecord
from megahour.train.status import StatusError, read_status, summarize_attempt, summarize_reads


def _attempt(logs, steps, resumed_from, ending) -> None:
    metrics = RunMetrics(logs, rank=0)
    metrics.event("start", resumed_from=resumed_from, choice={"strategy": "world"}, device="cpu")
    for step in steps:
        metrics.step(StepRecord(step, loss=1.0 / step, seconds=0.2, data_wait_seconds=0.01, samples=16))
    if ending:
        metrics.event(ending, step=steps[-1])
    metrics.close()


@pytest.fixture
def run_dir(tmp_path):
    logs = tmp_path / "4242" / "logs"
    _attempt(logs, [1, 2, 3], None, "injected failure")
    _attempt(logs, [3, 4, 5], 2, "end")
    (logs / "result.json").write_text(json.dumps({"steps": 5, "digest": "abc"}))
    return tmp_path


def test_attempts_and_their_figures_come_from_the_logs(run_dir) -> None:
    status = read_status("4242", run_dir)
    assert status.finished and status.result["digest"] == "abc"
    first, second = status.attempts
    assert (first.attempt, first.step, first.ended, first.resumed_from) == (0, 3, "injected failure", None)
    assert (second.first_step, second.step, second.resumed_from, second.ended) == (3, 5, 2, "end")
    assert second.loss == pytest.approx(0.2) and second.step_seconds_mean == pytest.approx(0.2)
    assert second.data_wait_fraction == pytest.approx(0.05) and second.samples_per_second == pytest.approx(80)
    assert second.data_wait_max_seconds == pytest.approx(0.01)  # the longest step's, not their sum
    assert second.strategy == "world" and second.device == "cpu"


def test_the_cli_prints_a_table_and_json(run_dir, capsys) -> None:
    assert main(["train", "status", "4242", "--root", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "2 attempt(s), finished" in out and "injected failure" in out and "5.0%" in out
    assert main(["train", "status", str(run_dir / "4242"), "--json"]) == 0  # a run directory works too
    figures = json.loads(capsys.readouterr().out)
    assert [a["step"] for a in figures["attempts"]] == [3, 5] and figures["finished"] is True


def test_a_torn_last_line_is_skipped_and_a_damaged_log_refused() -> None:
    lines = [
        '{"event": "start", "resumed_from": null}',
        '{"step": 1, "loss": 0.5, "seconds": 0.1}',
        '{"step": 2, "lo',
    ]
    status = summarize_attempt(0, lines)
    assert status.step == 1 and status.torn_lines == 1 and status.ended is None
    with pytest.raises(StatusError, match="line 2 is not JSON"):
        summarize_attempt(0, [lines[0], '{"st', lines[1]])


def test_an_unknown_job_is_one_line_naming_the_fix(tmp_path, capsys) -> None:
    assert main(["train", "status", "999", "--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no training job 999" in err and "--root runtime_train_root" in err


def _ledger(lines: list[tuple[int, list[list[int]], int]]) -> list[str]:
    return [
        json.dumps({"step": s, "items": items, "pieces": 2, "fallbacks": f, "under_store_bytes": 10 * f})
        for s, items, f in lines
    ]


def test_reads_keep_the_last_line_of_each_step_and_compare_by_digest() -> None:
    straight = summarize_reads({0: _ledger([(1, [[0, 0]], 0), (2, [[0, 2]], 0), (3, [[1, 2]], 0)])})
    # killed after step 2 with its checkpoint at 1: step 2 is read again, by the resumed attempt
    resumed = summarize_reads(
        {0: _ledger([(1, [[0, 0]], 0), (2, [[0, 2]], 0), (2, [[0, 2]], 1), (3, [[1, 2]], 1)])}
    )
    assert resumed.complete and resumed.steps == 3 and resumed.samples == 3
    assert resumed.digest == straight.digest
    assert (resumed.lines, straight.lines) == (4, 3)
    assert (resumed.fallbacks, resumed.pieces, resumed.under_store_bytes) == (2, 8, 20)


def test_a_lost_step_or_a_sample_trained_twice_is_reported() -> None:
    lost = summarize_reads(
        {
            0: _ledger([(1, [[0, 0]], 0), (3, [[0, 1]], 0)]),
            1: _ledger([(1, [[0, 5]], 0), (2, [[0, 6]], 0), (3, [[0, 7]], 0)]),
        }
    )
    assert (lost.steps, lost.missing_steps, lost.complete) == (3, 1, False)
    twice = summarize_reads({0: _ledger([(1, [[0, 0]], 0), (2, [[0, 0]], 0)])})
    assert (twice.duplicate_items, twice.complete) == (1, False)
    # another epoch's read of the same row is a new sample
    assert summarize_reads({0: _ledger([(1, [[0, 0]], 0), (2, [[1, 0]], 0)])}).complete


def test_a_torn_ledger_line_is_skipped_only_at_the_end() -> None:
    lines = _ledger([(1, [[0, 0]], 0), (2, [[0, 1]], 0)])
    torn = summarize_reads({0: [*lines, '{"step": 3, "ite']})
    assert (torn.steps, torn.torn_lines) == (2, 1)
    with pytest.raises(StatusError, match=r"rank-0\.jsonl: line 1 is not JSON"):
        summarize_reads({0: ["{not json", *lines]})
