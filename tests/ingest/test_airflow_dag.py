"""The megahour_ingest DAG: it parses in a DagBag without errors and has the intended shape (tasks, trigger
rules, the mapped per-batch group, params, retries, critical markers).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from airflow.sdk import TriggerRule

from megahour.ingest import airflow_dag
from megahour.ingest.slurm_operator import SlurmStepOperator
from megahour.ingest.steps import STEPS
from megahour.ingest.work import RUN_PARAMS

EXPECTED_TASKS = {
    "discover",
    "plan",
    "batch.validate",
    "batch.transcode",
    "batch.upload",
    "batch.register",
    "batch.previews",
    "batch.qc",
    "summary",
}

CONFIG = """\
landing: {root}/landing
storage: {root}/storage
runs: {root}/runs
partition: ingest-test
megahour: /opt/megahour/bin/megahour
stagger_jitter_s: 1.5
retries: 4
"""


def write_dag_folder(root: Path, **settings: object) -> tuple[Path, Path]:
    """An ingest config and a dags folder whose one file builds the DAG from it; returns both."""
    config = root / "ingest.yml"
    text = CONFIG.format(root=root)
    for key, value in settings.items():
        text = re.sub(rf"^{key}: .*$", f"{key}: {value}", text, flags=re.MULTILINE)
    config.write_text(text)
    dags = root / "dags"
    dags.mkdir()
    (dags / "megahour_ingest.py").write_text(
        "from megahour.ingest.airflow_dag import build_ingest_dag\n\n"
        f"dag = build_ingest_dag({str(config)!r})\n"
    )
    return config, dags


@pytest.fixture(scope="module")
def dagbag(tmp_path_factory):
    from airflow.dag_processing.dagbag import DagBag

    _config, dags = write_dag_folder(tmp_path_factory.mktemp("airflow-dag"))
    return DagBag(dag_folder=str(dags))


@pytest.fixture(scope="module")
def dag(dagbag):
    return dagbag.dags[airflow_dag.DAG_ID]


def test_dag_file_imports_cleanly(dagbag) -> None:
    assert dagbag.import_errors == {}
    assert list(dagbag.dags) == ["megahour_ingest"]


def test_tasks_and_their_steps(dag) -> None:
    assert set(dag.task_dict) == EXPECTED_TASKS
    assert dag.schedule is None or str(dag.timetable.summary) == "None"
    for task in dag.tasks:
        assert isinstance(task, SlurmStepOperator)
        assert task.task_id.rsplit(".", 1)[-1] == task.step
        assert task.partition == "ingest-test"
        assert task.megahour == "/opt/megahour/bin/megahour"
        assert task.runs.endswith("/runs")
        assert task.default_jitter_s == 1.5


def test_wiring(dag) -> None:
    def down(task_id: str) -> set[str]:
        return set(dag.get_task(task_id).downstream_task_ids)

    assert down("discover") == {"plan"}
    # Every per-batch task reads plan's XCom (its batch index), so each has plan as a direct upstream.
    assert down("plan") == {task for task in EXPECTED_TASKS if task.startswith("batch.")} | {"summary"}
    assert down("batch.validate") == {"batch.transcode"}
    assert down("batch.transcode") == {"batch.upload", "batch.previews", "batch.qc"}
    assert down("batch.upload") == {"batch.register"}
    for leaf in ("batch.register", "batch.previews", "batch.qc"):
        assert down(leaf) == {"summary"}
    assert [task.task_id for task in dag.leaves] == ["summary"]  # summary alone decides the run


def test_trigger_rules(dag) -> None:
    rules = {task.task_id: task.trigger_rule for task in dag.tasks}
    assert rules.pop("discover") == TriggerRule.ALL_SUCCESS
    assert rules.pop("summary") == TriggerRule.ALL_DONE
    assert set(rules.values()) == {TriggerRule.NONE_FAILED}


def test_per_batch_steps_are_a_mapped_group_over_plans_output(dag) -> None:
    from airflow.sdk.definitions.taskgroup import MappedTaskGroup

    group = dag.task_group_dict["batch"]
    assert isinstance(group, MappedTaskGroup)
    assert {task.task_id for task in group} == {f"batch.{name}" for name in airflow_dag.BATCH_CHAIN} | {
        "batch.previews",
        "batch.qc",
    }
    (upstream,) = [operator.task_id for operator, _key in group._expand_input.iter_references()]
    assert upstream == "plan"
    # Only a task that returns on a worker pushes an XCom that mapping can use: plan does not defer.
    assert [task.task_id for task in dag.tasks if not task.deferrable] == ["plan"]
    assert all(name in STEPS and STEPS[name].per_batch for name in airflow_dag.BATCH_CHAIN)


def test_params(dag) -> None:
    params = dag.params.dump()
    assert params["steps"] == dict.fromkeys(STEPS, True)
    assert params["jitter_s"] == 1.5
    assert params["fail_steps"] == []
    assert params["landing"].endswith("/landing")
    # discover checks the same keys again (work.normalize_params): the two lists must not drift.
    assert set(params) == set(RUN_PARAMS)
    # summary decides the run: the params schema does not let a run switch it off.
    assert dag.params.get_param("steps").schema["properties"]["summary"] == {"const": True}


def test_retries_and_the_final_verdict(dag) -> None:
    for task in dag.tasks:
        assert task.retries == 4
        assert task.retry_delay == airflow_dag.RETRY_DELAY
    assert dag.get_task("summary").final_exit_codes == (airflow_dag.SUMMARY_CRITICAL_FAILED_EXIT,)
    assert dag.get_task("batch.upload").final_exit_codes == ()


def test_critical_marking_follows_steps(dag) -> None:
    for task in dag.tasks:
        critical = STEPS[task.step].critical
        assert task.critical is critical
        label = "critical" if critical else "non-critical"
        assert task.task_display_name == f"{task.step} ({label})"
        assert task.doc_md.startswith(f"**{label}**")
    assert {t.step for t in dag.tasks if not t.critical} == {"previews", "qc"}


def test_serializes_for_the_scheduler(dag) -> None:
    from airflow.serialization.serialized_objects import DagSerialization

    data = DagSerialization.to_dict(dag)
    restored = DagSerialization.from_dict(data)
    assert set(restored.task_dict) == EXPECTED_TASKS


@pytest.mark.integration
def test_dags_test_end_to_end_with_a_fake_slurm(tmp_path, run) -> None:
    """``airflow dags test`` on a real landing zone: every step runs (synchronously, via the fake sbatch)
    as ``megahour ingest step``. Proves the wiring: mapping over plan's batches, skips, the drill, and
    summary alone deciding the run (a non-critical failure passes, a critical one fails)."""
    from tests.conftest import tool
    from tests.ingest.test_slurm_operator import FakeSlurm, install_fake_slurm

    install_fake_slurm(tmp_path / "bin")
    config, dags = write_dag_folder(tmp_path, retries=0, stagger_jitter_s=0.5, megahour=tool("megahour"))
    env = {
        "AIRFLOW_HOME": str(tmp_path / "home"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "FAKE_SLURM_DIR": str(tmp_path / "slurm"),
        "MEGAHOUR_INGEST_CONFIG": str(config),
        "MEGAHOUR_WAREHOUSE": f"chdb:{tmp_path / 'warehouse'}",
        "PATH": os.pathsep.join(
            [str(tmp_path / "bin"), str(Path(tool("megahour")).parent), os.environ["PATH"]]
        ),
    }
    landing = [tool("megahour"), "ingest", "landing", str(tmp_path / "landing")]
    made = run([*landing, "--count", "8", "--corrupt", "1", "--seconds", "1", "--seed", "1"], env=env)
    assert made.returncode == 0, made.stderr
    migrated = run([tool("airflow"), "db", "migrate"], env=env)
    assert migrated.returncode == 0, migrated.stderr[-3000:]

    def dags_test(conf: str):
        before = set((tmp_path / "runs").iterdir()) if (tmp_path / "runs").exists() else set()
        proc = run([tool("airflow"), "dags", "test", "megahour_ingest", "-c", conf], env=env, timeout=600)
        (run_dir,) = set((tmp_path / "runs").iterdir()) - before
        return proc, run_dir

    # A non-critical failure (the qc drill) and a switched-off step: the run succeeds.
    ok, run_dir = dags_test('{"jitter_s": 0.5, "steps": {"previews": false}, "fail_steps": ["qc"]}')
    output = ok.stdout + ok.stderr
    assert ok.returncode == 0, output[-5000:]
    assert "state=success" in output
    done = {p.name for p in (run_dir / "steps").iterdir()}
    assert {"discover.json", "plan.json", "summary.json"} <= done
    batches = sorted(int(n.split("-")[1].split(".")[0]) for n in done if n.startswith("register-"))
    assert batches == [0, 1]  # plan made two batches; the group was mapped over both
    assert not any(n.startswith(("previews-", "qc-")) for n in done)
    names = [call[call.index("--job-name") + 1] for call in FakeSlurm(tmp_path / "slurm").calls("sbatch")]
    assert not any(".batch.previews." in n for n in names)  # skipped without submitting
    assert sum(".batch.qc." in n for n in names) == 2
    summary = " ".join((run_dir / "logs" / "summary.try1.log").read_text().split())  # rich wraps lines
    assert "critical failures none" in summary and "qc[0]" in summary and "qc[1]" in summary

    # A critical failure (the upload drill): register never runs, summary fails the run.
    failed, run_dir = dags_test('{"jitter_s": 0, "fail_steps": ["upload"]}')
    output = failed.stdout + failed.stderr
    assert failed.returncode != 0
    assert "state=failed" in output
    assert not any(p.name.startswith("register-") for p in (run_dir / "logs").iterdir())
    summary = " ".join((run_dir / "logs" / "summary.try1.log").read_text().split())
    assert "critical steps failed" in summary and "upload[0]" in summary
