"""The queue as the Slurm collector reads it: real `squeue --json` of 22.05 and 24.11 (captures/)."""

from __future__ import annotations

import json

from megahour.slurm.queue import QueuedJob, parse_squeue_queue_json
from tests.slurm.fixtures import capture


def test_slurm_2205_lists_running_pending_and_recently_ended_jobs():
    parsed = parse_squeue_queue_json(capture("squeue-mixed.json"))
    assert parsed.complete and len(parsed.items) == 10
    assert [j.state for j in parsed.items].count("CANCELLED") == 6
    assert QueuedJob("10", "gpu", "PENDING", "Resources", 0) in parsed.items
    assert next(j for j in parsed.items if j.job_id == "4").restarts == 1


def test_slurm_2411_states_are_lists():
    parsed = parse_squeue_queue_json(capture("slurm2411-squeue-mixed.json"))
    assert parsed.items == [
        QueuedJob("1", "gpu", "RUNNING", "None", 0),
        QueuedJob("2", "gpu", "PENDING", "Resources", 0),
    ]


def test_a_completing_job_counts_as_its_first_state():
    parsed = parse_squeue_queue_json(capture("squeue-completing.json"))
    assert next(j for j in parsed.items if j.job_id == "7").state == "COMPLETING"


def test_an_entry_without_a_partition_is_a_note_not_a_guess():
    data = json.loads(capture("slurm2411-squeue-mixed.json"))
    del data["jobs"][0]["partition"]
    parsed = parse_squeue_queue_json(json.dumps(data))
    assert [j.job_id for j in parsed.items] == ["2"] and not parsed.complete


def test_slurm_errors_and_bad_json_are_notes():
    assert not parse_squeue_queue_json(capture("squeue-controller-down.json")).complete
    assert not parse_squeue_queue_json("{not json").complete
