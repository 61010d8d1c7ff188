"""The airflow role's systemd units: one per component, more for the components that run replicated.

Airflow runs several schedulers and several triggerers against one metadata database (row locks in
PostgreSQL share the work; a dead scheduler's tasks are adopted or retried by the others, a dead
triggerer's triggers are taken over). ``airflow_replicas`` says how many of each run on the Airflow host;
the first keeps the plain unit name (``airflow-scheduler``), so a deploy that adds replicas leaves the
running unit alone, and the others are ``airflow-scheduler-2``, ``airflow-scheduler-3``, ...

- ``airflow_units(components, replicas)``: ``[{"name": "airflow-scheduler-2", "component": "scheduler"},
  ...]`` in start order (each component's units together, in the components' order).
- ``airflow_surplus_units(unit_files, units)``: of the unit files found on the host, the replica units no
  longer wanted (after ``airflow_replicas`` went down), to stop and remove.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from ansible.errors import AnsibleFilterError

# The components Airflow runs safely more than once against one database. The API server could run twice
# only behind a balancer on different ports; the DAG processor twice would parse every file twice.
REPLICABLE = ("scheduler", "triggerer")
MAX_REPLICAS = 4
_REPLICA_UNIT = re.compile(r"^(airflow-(?:" + "|".join(REPLICABLE) + r")-[0-9]+)\.service$")


def airflow_units(
    components: Sequence[str], replicas: Mapping[str, int] | None = None
) -> list[dict[str, str]]:
    """Each component's units, ``airflow-<component>`` then ``airflow-<component>-2`` and on."""
    replicas = dict(replicas or {})
    unknown = sorted(set(replicas) - set(REPLICABLE))
    if unknown:
        raise AnsibleFilterError(
            f"airflow_replicas names {', '.join(unknown)}: only {' and '.join(REPLICABLE)} may run more than "
            "once; drop the others from airflow_replicas"
        )
    units: list[dict[str, str]] = []
    for component in components:
        count = replicas.get(component, 1)
        if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_REPLICAS:
            raise AnsibleFilterError(
                f"airflow_replicas.{component} is {count!r}: set a whole number from 1 to {MAX_REPLICAS}"
            )
        for index in range(1, count + 1):
            suffix = "" if index == 1 else f"-{index}"
            units.append({"name": f"airflow-{component}{suffix}", "component": component})
    return units


def airflow_surplus_units(unit_files: Iterable[str], units: Sequence[Mapping[str, str]]) -> list[str]:
    """Replica units present on the host (file names or paths) that ``units`` no longer has, sorted."""
    wanted = {unit["name"] for unit in units}
    found = set()
    for path in unit_files:
        match = _REPLICA_UNIT.match(str(path).rsplit("/", 1)[-1])
        if match and match.group(1) not in wanted:
            found.add(match.group(1))
    return sorted(found)


class FilterModule:
    def filters(self):
        return {"airflow_units": airflow_units, "airflow_surplus_units": airflow_surplus_units}
