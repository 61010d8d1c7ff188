"""megahour.deploy.events on a real ansible-runner event stream (fixtures/README.md says how it was
recorded): progress lines, per-play counts that add up to ansible's own recap, the first failure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from megahour.deploy.events import COUNTERS, DeployTally

FIXTURE = Path(__file__).parent / "fixtures" / "ansible-runner-events.jsonl"


@pytest.fixture(scope="module")
def events() -> list[dict]:
    return [json.loads(line) for line in FIXTURE.read_text().splitlines()]


def fed(events, **kwargs) -> tuple[DeployTally, list[str]]:
    tally = DeployTally(**kwargs)
    lines = [line for event in events for line in tally.feed(event)]
    return tally, lines


def test_per_play_counts_add_up_to_ansibles_recap(events):
    tally, _ = fed(events)
    stats = events[-1]["event_data"]
    assert events[-1]["event"] == "playbook_on_stats"
    assert set(tally.recap) == {"node-a", "node-b", "node-c"}
    for host, recap in tally.recap.items():
        summed = {name: sum(p.hosts.get(host, {}).get(name, 0) for p in tally.plays) for name in COUNTERS}
        # rescued comes only from the stats (no event marks a rescue as such); none here.
        assert {k: v for k, v in summed.items() if k != "rescued"} == {
            k: v for k, v in recap.items() if k != "rescued"
        }, host
    assert tally.recap["node-b"]["failed"] == stats["failures"]["node-b"] == 1
    assert tally.recap["node-c"]["unreachable"] == stats["dark"]["node-c"] == 1
    assert tally.recap["node-a"]["ignored"] == 1 and tally.recap["node-a"]["failed"] == 0


def test_the_first_failure_is_the_unreachable_host_and_both_are_reported(events):
    tally, lines = fed(events)
    first = tally.first_failure
    assert (first.host, first.task, first.play, first.unreachable) == (
        "node-c",
        "Say ok",
        "Prepare the hosts",
        True,
    )
    assert "port 9" in first.message
    assert [(f.host, f.task) for f in tally.failures] == [("node-c", "Say ok"), ("node-b", "Break on node-b")]
    assert tally.failures[1].message == "non-zero return code; rc 1"
    # the ignored failure on node-a is not a failure
    assert all(f.host != "node-a" for f in tally.failures)
    assert sum(line.startswith("  ✗ ") for line in lines) == 2


def test_progress_lines_follow_the_plays_and_tasks(events):
    _, lines = fed(events)
    assert lines[0] == "play 1: Prepare the hosts (all)"
    assert lines[1] == "  task: Say ok"
    assert "play 2: Configure the service (all)" in lines
    done = [line for line in lines if line.startswith("  done: ")]
    assert done == [
        "  done: node-a ok=3 changed=1 | node-b ok=3 changed=1 | node-c unreachable=1",
        "  done: node-a ok=2 skipped=1 ignored=1 | node-b failed=1 skipped=1",
    ]
    _, quiet = fed(events, show_tasks=False)
    assert not any(line.startswith("  task: ") for line in quiet) and len(quiet) == len(lines) - 6


def test_summary_has_stable_keys(events):
    tally, _ = fed(events)
    summary = tally.summary()
    assert list(summary) == ["plays", "tasks", "hosts", "first_failure", "failures"]
    assert summary["tasks"] == 6 and summary["first_failure"]["host"] == "node-c"
    json.dumps(summary)


def test_an_empty_stream_has_no_failure_and_no_recap():
    tally = DeployTally()
    assert tally.feed({"event": "playbook_on_start", "event_data": {}}) == []
    assert tally.first_failure is None and tally.recap_lines() == [] and tally.summary()["plays"] == []
