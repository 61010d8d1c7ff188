"""The airflow role's unit filters (roles/airflow/filter_plugins/airflow_units.py): replicated schedulers
and triggerers, and the replica units left over when airflow_replicas goes down."""

import pytest
from ansible.errors import AnsibleFilterError

from tests.conftest import REPO, filter_plugins

COMPONENTS = ["api-server", "scheduler", "dag-processor", "triggerer"]


@pytest.fixture(scope="module")
def f():
    return filter_plugins(REPO / "roles/airflow/filter_plugins/airflow_units.py")


def test_one_unit_a_component_without_replicas(f):
    assert f["airflow_units"](COMPONENTS, {}) == [
        {"name": f"airflow-{c}", "component": c} for c in COMPONENTS
    ]
    assert f["airflow_units"](COMPONENTS, None) == f["airflow_units"](COMPONENTS, {})


def test_replicas_follow_their_first_unit_which_keeps_the_plain_name(f):
    names = [u["name"] for u in f["airflow_units"](COMPONENTS, {"scheduler": 2, "triggerer": 3})]
    assert names == [
        "airflow-api-server",
        "airflow-scheduler",
        "airflow-scheduler-2",
        "airflow-dag-processor",
        "airflow-triggerer",
        "airflow-triggerer-2",
        "airflow-triggerer-3",
    ]
    # A component left out of the list gets no unit, whatever its replica count.
    assert [u["name"] for u in f["airflow_units"](["api-server", "scheduler"], {"triggerer": 2})] == [
        "airflow-api-server",
        "airflow-scheduler",
    ]


@pytest.mark.parametrize(
    ("replicas", "message"),
    [
        ({"api-server": 2}, "only scheduler and triggerer may run more than once"),
        ({"dag-processor": 2, "scheduler": 2}, "airflow_replicas names dag-processor"),
        ({"scheduler": 0}, "airflow_replicas.scheduler is 0: set a whole number from 1 to 4"),
        ({"scheduler": 5}, "airflow_replicas.scheduler is 5"),
        ({"triggerer": "2"}, "airflow_replicas.triggerer is '2'"),
        ({"triggerer": True}, "airflow_replicas.triggerer is True"),
    ],
)
def test_bad_replica_counts_name_the_key_and_the_fix(f, replicas, message):
    with pytest.raises(AnsibleFilterError, match=message):
        f["airflow_units"](COMPONENTS, replicas)


def test_surplus_units_are_only_replicas_no_longer_wanted(f):
    units = f["airflow_units"](COMPONENTS, {"scheduler": 2})
    found = [
        "/etc/systemd/system/airflow-scheduler.service",
        "/etc/systemd/system/airflow-scheduler-2.service",
        "/etc/systemd/system/airflow-scheduler-3.service",
        "/etc/systemd/system/airflow-triggerer-2.service",
        "/etc/systemd/system/airflow-triggerer.service",
        # never a first unit, another component's file or a unit not of this role
        "/etc/systemd/system/airflow-api-server-2.service",
        "/etc/systemd/system/airflow-dag-processor.service",
        "/etc/systemd/system/airflow-scheduler-x.service",
        "/etc/systemd/system/slurmctld.service",
    ]
    assert f["airflow_surplus_units"](found, units) == ["airflow-scheduler-3", "airflow-triggerer-2"]
    assert f["airflow_surplus_units"]([], units) == []
