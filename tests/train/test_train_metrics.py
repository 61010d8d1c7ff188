"""The trainer's reports: attempt-numbered JSON lines and the Prometheus textfile."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from megahour.train.metrics import JOB_LABEL, RunMetrics, StepRecord, textfile_name

RECORD = StepRecord(step=3, loss=0.25, seconds=0.5, data_wait_seconds=0.1, samples=16, mfu=0.4)

# The exposition format (text 0.0.4), strictly: HELP and TYPE once per family, before its samples.
HELP = re.compile(r"# HELP (?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*) (?P<help>.+)")
TYPE = re.compile(r"# TYPE (?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*) (?P<type>counter|gauge|untyped)")
SAMPLE = re.compile(
    r'(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)\{(?P<labels>[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*"'
    r'(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*")*)\} (?P<value>[-+]?[0-9.eE+-]+|NaN|[+-]Inf)'
)


def parse(text: str) -> dict[str, dict]:
    """{family: {"help", "type", "samples": [(labels, value)]}}; fails on anything out of format."""
    assert text.endswith("\n")
    out: dict[str, dict] = {}
    current = None
    for line in text.splitlines():
        if m := HELP.fullmatch(line):
            assert m["name"] not in out, f"{m['name']} declared twice"
            current = out[m["name"]] = {"help": m["help"], "type": None, "samples": []}
        elif m := TYPE.fullmatch(line):
            assert current is out.get(m["name"]) and current["type"] is None, line
            current["type"] = m["type"]
        elif m := SAMPLE.fullmatch(line):
            assert current is out.get(m["name"]) and current["type"], f"sample before its HELP/TYPE: {line}"
            current["samples"].append((m["labels"], float(m["value"])))
        else:
            raise AssertionError(f"not exposition format: {line!r}")
    return out


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_step_record_derives_wait_and_throughput() -> None:
    assert RECORD.data_wait_fraction == pytest.approx(0.2)
    assert RECORD.samples_per_second == pytest.approx(32.0)
    assert StepRecord(1, 0.0, 0.0, 0.0, 8).samples_per_second == 0.0  # no division by a zero-time step


def test_rank_0_numbers_attempts_and_appends_json_lines(tmp_path) -> None:
    for attempt in range(2):
        metrics = RunMetrics(tmp_path, rank=0)
        assert metrics.directory == tmp_path / f"attempt-{attempt}"
        metrics.event("start", resumed_from=None, where=tmp_path)
        metrics.step(RECORD)
        metrics.close()
        metrics.close()  # idempotent
    lines = [json.loads(x) for x in (tmp_path / "attempt-1" / "metrics.jsonl").read_text().splitlines()]
    assert lines[0] == {"event": "start", "resumed_from": None, "where": str(tmp_path)}
    assert lines[1] == {
        "step": 3, "loss": 0.25, "seconds": 0.5, "data_wait_seconds": 0.1, "samples": 16, "mfu": 0.4,
        "data_wait_fraction": pytest.approx(0.2), "samples_per_second": 32.0,
    }  # fmt: skip


def test_other_ranks_write_nothing(tmp_path) -> None:
    metrics = RunMetrics(tmp_path / "logs", rank=1, textfile_dir=tmp_path / "prom")
    metrics.event("start")
    metrics.step(RECORD)
    metrics.close()
    assert list(tmp_path.iterdir()) == []


def test_textfile_names_each_family_once_with_help_and_type(tmp_path) -> None:
    metrics = RunMetrics(None, rank=0, textfile_dir=tmp_path, job="4242", clock=Clock())
    metrics.step(RECORD)
    assert metrics.directory is None  # no log dir: the textfile alone
    families = parse((tmp_path / "megahour_train_4242.prom").read_text())
    expected = {
        "megahour_train_step": 3,
        "megahour_train_step_seconds": 0.5,
        "megahour_train_data_wait_fraction": 0.2,
        "megahour_train_samples_per_second": 32,
        "megahour_train_loss": 0.25,
        "megahour_train_mfu": 0.4,
        "megahour_train_updated_timestamp_seconds": 1000,
        "megahour_train_running": 1,
    }
    counters = {"megahour_train_step_seconds_total": 0.5, "megahour_train_data_wait_seconds_total": 0.1}
    assert set(families) == set(expected) | set(counters)
    for name, value in (expected | counters).items():
        family = families[name]
        assert family["type"] == ("counter" if name in counters else "gauge") and family["help"]
        assert family["samples"] == [(f'{JOB_LABEL}="4242"', pytest.approx(value))]


def test_the_totals_add_up_every_step_and_close_marks_the_run_ended(tmp_path) -> None:
    clock = Clock()
    metrics = RunMetrics(None, rank=0, textfile_dir=tmp_path, job="7", clock=clock)
    for step in range(1, 4):  # steps 2 and 3 come before the 15 s interval: not written yet
        metrics.step(StepRecord(step, 0.3, seconds=2.0, data_wait_seconds=0.5, samples=8))
    written = parse((tmp_path / "megahour_train_7.prom").read_text())
    assert written["megahour_train_step"]["samples"][0][1] == 1
    clock.now += 1
    metrics.close()
    families = parse((tmp_path / "megahour_train_7.prom").read_text())
    value = {name: family["samples"][0][1] for name, family in families.items()}
    assert value["megahour_train_step"] == 3 and value["megahour_train_running"] == 0
    assert value["megahour_train_step_seconds_total"] == 6.0
    assert value["megahour_train_data_wait_seconds_total"] == 1.5
    metrics.close()  # idempotent: nothing is written again
    assert value["megahour_train_updated_timestamp_seconds"] == 1001


def test_mfu_is_left_out_when_unknown(tmp_path) -> None:
    metrics = RunMetrics(None, rank=0, textfile_dir=tmp_path, job="cpu run/1")
    metrics.step(StepRecord(1, 1.0, 0.1, 0.0, 8, mfu=None))
    path = tmp_path / f"{textfile_name('cpu run/1')}.prom"
    assert path.name == "megahour_train_cpu_run_1.prom"
    families = parse(path.read_text())
    assert "megahour_train_mfu" not in families and "megahour_train_loss" in families


def test_textfile_is_rewritten_at_most_every_interval_and_on_close(tmp_path) -> None:
    clock = Clock()
    metrics = RunMetrics(None, rank=0, textfile_dir=tmp_path, textfile_interval_s=15, clock=clock)
    path = tmp_path / "megahour_train.prom"

    def step_shown() -> float:
        return parse(path.read_text())["megahour_train_step"]["samples"][0][1]

    metrics.step(StepRecord(1, 1.0, 0.1, 0.0, 8))
    assert step_shown() == 1  # the first step is out at once
    clock.now += 5
    metrics.step(StepRecord(2, 1.0, 0.1, 0.0, 8))
    assert step_shown() == 1  # within the interval: not rewritten
    clock.now += 10
    metrics.step(StepRecord(3, 1.0, 0.1, 0.0, 8))
    assert step_shown() == 3
    metrics.step(StepRecord(4, 1.0, 0.1, 0.0, 8))
    metrics.close()
    assert step_shown() == 4  # close publishes the last step
    assert sorted(p.name for p in Path(tmp_path).iterdir()) == ["megahour_train.prom"]  # no temporaries
