"""The monitoring role's alert rules, rendered with its defaults, under `promtool check rules` and
`promtool test rules` (tests/roles/monitoring_rules_test.yml); every alert has a test there."""

from __future__ import annotations

import re
import shutil
import subprocess

import jinja2
import pytest
import yaml

from tests.conftest import REPO

ROLE = REPO / "roles" / "monitoring"
TESTS = REPO / "tests" / "roles" / "monitoring_rules_test.yml"


def render_rules(**overrides) -> str:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    # monitoring_alert_for defaults to the role's durations (vars/main.yml)
    defaults["monitoring_alert_for"] = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())[
        "monitoring_alert_for_keys"
    ]
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    template = env.from_string((ROLE / "templates" / "megahour-rules.yml.j2").read_text())
    return template.render({**defaults, **overrides, "ansible_managed": "managed by the test"})


def promtool_run(binary: str, cwd, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([binary, *args], cwd=cwd, capture_output=True, text=True)


@pytest.fixture
def rules_dir(tmp_path):
    (tmp_path / "megahour.yml").write_text(render_rules())
    shutil.copy(TESTS, tmp_path / TESTS.name)
    return tmp_path


def test_the_rules_pass_promtool_check(promtool, rules_dir):
    proc = promtool_run(promtool, rules_dir, "check", "rules", "megahour.yml")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_alert_behaves_as_its_promtool_test_says(promtool, rules_dir):
    proc = promtool_run(promtool, rules_dir, "test", "rules", TESTS.name)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_alert_has_a_test():
    rules = yaml.safe_load(render_rules())
    alerts = {rule["alert"] for group in rules["groups"] for rule in group["rules"] if "alert" in rule}
    tests = yaml.safe_load(TESTS.read_text())["tests"]
    cases = [case for test in tests for case in test.get("alert_rule_test", [])]
    tested = {case["alertname"] for case in cases if case["exp_alerts"]}
    assert alerts - tested == set(), "alerts no test sees fire"
    assert tested - alerts == set(), "tests of alerts that do not exist"


def test_a_broken_rule_fails_the_test(promtool, rules_dir):
    # the test file can fail: with the data-wait threshold at 5%, job a's 4% no longer fires
    (rules_dir / "megahour.yml").write_text(render_rules(monitoring_data_wait_alert_fraction=0.05))
    proc = promtool_run(promtool, rules_dir, "test", "rules", TESTS.name)
    assert proc.returncode != 0 and "MegahourTrainingDataWaitHigh" in proc.stdout + proc.stderr


def test_the_role_checks_for_every_duration_the_rules_use():
    # a monitoring_alert_for from an older release lacking one is refused by the role with the key named
    template = (ROLE / "templates" / "megahour-rules.yml.j2").read_text()
    used = set(re.findall(r"monitoring_alert_for\.(\w+)", template))
    keys = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["monitoring_alert_for_keys"]
    assert used == set(keys)
