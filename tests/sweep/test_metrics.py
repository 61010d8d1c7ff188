from __future__ import annotations

import re
from datetime import datetime

from megahour.metrics.textfile import escape
from megahour.slurm.parse import NodeState, parse_sinfo_nodes
from megahour.sweep.metrics import render_metrics
from megahour.sweep.rules import plan_sweep
from tests.slurm.fixtures import SINFO

NOW = datetime(2026, 11, 29, 14, 30, 0)

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL_VALUE = r'"(?:[^"\\\n]|\\[\\"n])*"'
_SAMPLE = re.compile(
    rf"({_NAME})(\{{(?:{_NAME}={_LABEL_VALUE})(?:,{_NAME}={_LABEL_VALUE})*\}})? (-?[0-9.e+]+)"
)
_HELP = re.compile(rf"# HELP ({_NAME}) .+")
_TYPE = re.compile(rf"# TYPE ({_NAME}) gauge")


def parse_exposition(text: str) -> dict[str, list[tuple[str, float]]]:
    """A strict reader for the subset we write: every line must be HELP, TYPE or a sample."""
    assert text.endswith("\n")
    families: dict[str, list[tuple[str, float]]] = {}
    typed: set[str] = set()
    for line in text.splitlines():
        if m := _HELP.fullmatch(line):
            families.setdefault(m.group(1), [])
        elif m := _TYPE.fullmatch(line):
            typed.add(m.group(1))
        elif m := _SAMPLE.fullmatch(line):
            assert m.group(1) in typed, f"sample before its TYPE: {line}"
            families[m.group(1)].append((m.group(2) or "", float(m.group(3))))
        else:
            raise AssertionError(f"not an exposition line: {line!r}")
    return families


def test_fixture_metrics():
    nodes = parse_sinfo_nodes(SINFO).items
    plan = plan_sweep(nodes, {n.name: "PASS" for n in nodes}, NOW)
    families = parse_exposition(render_metrics(plan, nodes, NOW))
    drained = dict(families["megahour_node_drained"])
    assert drained['{node="gpu-1",ours="true",reason_code="ecc_volatile_uncorrected"}'] == 1
    assert drained['{node="gpu-3",ours="false",reason_code="foreign"}'] == 1
    assert drained['{node="ctl",ours="false",reason_code=""}'] == 0
    assert len(drained) == 10
    seconds = dict(families["megahour_node_drained_seconds"])
    assert seconds['{node="gpu-1"}'] == 47 * 60 + 31
    assert '{node="ctl"}' not in seconds
    assert families["megahour_sweep_resumes_total"] == [("", 2)]
    alerts = {labels for labels, _ in families["megahour_alert_active"]}
    assert '{alertname="MegahourNodeDrainedIdle",node="gpu-3"}' in alerts
    assert families["megahour_sweep_last_run_timestamp_seconds"] == [("", NOW.timestamp())]
    assert families["megahour_sweep_query_ok"] == [("", 1)]
    assert families["megahour_sweep_history_ok"] == [("", 1)]


def test_failed_query_writes_only_run_level_gauges():
    families = parse_exposition(render_metrics(None, [], NOW, query_ok=False))
    assert families["megahour_sweep_query_ok"] == [("", 0)]
    assert families["megahour_node_drained"] == []
    assert families["megahour_alert_active"] == []
    assert families["megahour_sweep_resumes_total"] == [("", 0)]


def test_label_values_are_escaped():
    assert escape('a\\b"c\nd') == 'a\\\\b\\"c\\nd'
    node = NodeState('gpu"1\\x\ny', "drain", 'megahour:weird"code\\', NOW, "root")
    text = render_metrics(None, [node], NOW)
    families = parse_exposition(text)
    (labels, value) = families["megahour_node_drained"][0]
    assert labels == '{node="gpu\\"1\\\\x\\ny",ours="true",reason_code="weird\\"code\\\\"}'
    assert value == 1
    assert len(text.splitlines()) == len(text.split("\n")) - 1  # no raw newline leaked into a sample


def test_resumes_done_overrides_the_plan():
    nodes = parse_sinfo_nodes(SINFO).items
    plan = plan_sweep(nodes, {n.name: "PASS" for n in nodes}, NOW)
    families = parse_exposition(render_metrics(plan, nodes, NOW, resumes_done=1))
    assert families["megahour_sweep_resumes_total"] == [("", 1)]
