"""The default molecule lanes (tests/molecule/lanes.py) select every scenario exactly once: a scenario no
lane names would never run in `make test`, and one two lanes name would run twice at once on the same
containers."""

from _pytest.mark.expression import Expression

from tests.conftest import REPO
from tests.molecule.lanes import DEFAULT_LANES, RECAP_CHARS, RECAP_TAIL_LINES, failure_recap
from tests.molecule.test_scenarios import SCENARIOS


def _selects(lane: str, scenario: str) -> bool:
    # pytest -k matches a name case-insensitively as a substring of the test's id and its parents' names.
    names = (f"test_scenario[{scenario}]", "test_scenarios.py", "molecule", "tests")
    return Expression.compile(lane).evaluate(lambda word: any(word.lower() in name.lower() for name in names))


def test_every_scenario_runs_in_exactly_one_lane():
    for scenario in SCENARIOS:
        lanes = [lane for lane in DEFAULT_LANES if _selects(lane, scenario)]
        assert len(lanes) == 1, f"{scenario} is selected by {lanes or 'no lane'} of {DEFAULT_LANES}"


def test_the_makefile_runs_the_default_lanes():
    makefile = (REPO / "Makefile").read_text()
    expected = " ".join(f"'{lane}'" if " " in lane else lane for lane in DEFAULT_LANES)
    assert f"MOLECULE_LANES ?= {expected}\n" in makefile


def test_the_recap_names_the_last_fatal_task_that_was_not_ignored_with_its_message():
    lines = [
        "  molecule cluster |   700 s | fatal: [cl-ctl-1]: FAILED! => ",
        # pytest's report of the failed scenario: molecule's last lines, behind "E".
        "E       AssertionError: molecule cluster failed (full log: .cache/molecule-logs/cluster.log):",
        "E         TASK [Probe the old controller] ****",
        "E         fatal: [cl-ctl-1]: FAILED! => ",
        "E             changed: false",
        "E             rc: 1",
        "E         ...ignoring",
        "E         TASK [Check the backup took over in time] ****",
        "E         fatal: [cl-ctl-1 -> cl-ctl-2]: FAILED! => ",
        "E             assertion: failover_takeovers.stdout_lines[0] | int == 2",
        "E             changed: false",
        "E             msg: takeovers before 1, now 1; the backup's log ends: " + "x" * 3000,
        "E         ",
        "E         PLAY RECAP *****",
    ]
    recap = failure_recap(lines)
    assert recap[:2] == [
        "TASK [Check the backup took over in time] ****",
        "fatal: [cl-ctl-1 -> cl-ctl-2]: FAILED! =>",
    ]
    assert recap[2].startswith("    msg: takeovers before 1, now 1;")
    assert sum(len(line) + 1 for line in recap) <= RECAP_CHARS + 1


def test_a_lane_with_no_fatal_task_is_recapped_by_its_last_lines():
    lines = [f"line {n}" for n in range(20)] + [
        "  molecule cluster |    3 s | ERROR     the image did not build"
    ]
    recap = failure_recap(lines)
    assert recap == [f"line {n}" for n in range(20 - RECAP_TAIL_LINES + 1, 20)] + [
        "ERROR     the image did not build"
    ]
