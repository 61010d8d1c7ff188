"""The default molecule lanes (tests/molecule/lanes.py) select every scenario exactly once: a scenario no
lane names would never run in `make test`, and one two lanes name would run twice at once on the same
containers."""

from _pytest.mark.expression import Expression

from tests.conftest import REPO
from tests.molecule.lanes import DEFAULT_LANES
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
