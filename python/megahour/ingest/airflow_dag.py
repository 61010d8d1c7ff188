"""The ``megahour_ingest`` Airflow DAG: every step is a Slurm job (``SlurmStepOperator``).

Shape::

    discover -> plan -> batch[i] (mapped task group, one per batch plan.json holds) -> summary
                        batch[i]: validate -> transcode -> upload -> register
                                                     \\-> previews, qc   (non-critical)

``plan`` returns the batch indexes (``range(batch_count(run_dir))``) as its XCom and the ``batch`` task
group is expanded over them. It waits for its short job on the worker (``deferrable=False``): only a task
that returns on a worker pushes an XCom Airflow can map over, and it avoids the resume-after-defer race
described in ``slurm_operator``. Each batch moves through its steps on its own: batch 3 may be uploading
while batch 7 still transcodes. No batches (an empty landing zone) maps the group to zero instances.

Trigger rules, and why:

- Every step after ``discover`` uses ``none_failed``: it runs when its upstream steps succeeded *or were
  skipped*. A step switched off in the run's params (``params.steps[name] = false``) is skipped by its
  operator without submitting anything, so the steps after it still run (switching off ``previews`` must
  not stop ``qc``; switching off ``validate`` still transcodes). A failed step, on the other hand, marks
  everything downstream of it ``upstream_failed``: ``transcode`` failing in batch 3 stops batch 3's upload
  and register but no other batch. ``none_failed_min_one_success`` was not used because a chain whose
  first steps are all switched off must still run its remaining steps.
- ``previews`` and ``qc`` hang off ``transcode`` and nothing critical depends on them, so their failure
  never blocks ``upload``/``register``.
- ``summary`` is ``all_done`` and the DAG's only leaf, so it always runs and alone decides the run's
  state: its step exits 0 when every enabled critical step succeeded and 3 otherwise (non-critical
  failures are reported, not fatal). Exit 3 fails the task without retries (the verdict is final).
- ``plan`` switched off leaves no batch list: Airflow then skips the whole mapped group, and ``summary``
  counts the per-batch steps that are still on as not done (the run fails). Switch plan off only together
  with the per-batch steps.
- Every per-batch task reads its batch index from plan's XCom, so each also has ``plan`` as a direct
  upstream (Airflow adds it); with ``none_failed`` that changes nothing.

Critical or not comes from ``STEPS[name].critical`` and shows in the UI as each task's display name
(``transcode (critical)``, ``qc (non-critical)``) and its doc_md.

Retries come from the config (``retries``) with a short fixed delay: a retried step first looks for its
still-running Slurm job by name and attaches to it (see ``slurm_operator``).

The airflow role deploys a one-line DAG file into the dags folder::

    from megahour.ingest.airflow_dag import build_ingest_dag
    dag = build_ingest_dag()
"""

from __future__ import annotations

import itertools
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Param, TriggerRule, task_group

from megahour.ingest.config import IngestConfig, load_config
from megahour.ingest.slurm_operator import SlurmStepOperator
from megahour.ingest.steps import STEPS

DAG_ID = "megahour_ingest"
BATCH_GROUP = "batch"
BATCH_CHAIN = ("validate", "transcode", "upload", "register")
NONCRITICAL_AFTER_TRANSCODE = ("previews", "qc")
RETRY_DELAY = timedelta(seconds=20)
SUMMARY_CRITICAL_FAILED_EXIT = 3


def display_name(step: str) -> str:
    return f"{step} ({'critical' if STEPS[step].critical else 'non-critical'})"


def dag_params(config: IngestConfig) -> dict[str, Param]:
    """The run's params; ``megahour.ingest.work.normalize_params`` checks the same keys again in discover."""
    jitter_s, landing = config.stagger_jitter_s, config.landing
    return {
        "steps": Param(
            {name: True for name in STEPS},
            type="object",
            # summary decides the run, so it cannot be switched off.
            properties={
                name: {"type": "boolean"} if name != "summary" else {"const": True} for name in STEPS
            },
            additionalProperties=False,
            description="Switch steps on or off for this run; a switched-off step is skipped.",
        ),
        "jitter_s": Param(
            float(jitter_s),
            type="number",
            minimum=0,
            description="Each task waits a deterministic delay in [0, jitter_s) before submitting its job.",
        ),
        "fail_steps": Param(
            [],
            type="array",
            items={"type": "string", "enum": list(STEPS)},
            description="Drill: these steps exit 1 on purpose (exercise the failure and retry paths).",
        ),
        "landing": Param(
            landing,
            type="string",
            description="Where recordings are taken from: the landing zone, a folder under it, or an "
            "s3://BUCKET/PREFIX (signed with the workers' credentials from the environment or instance "
            "profile).",
        ),
        "storage": Param(
            config.storage,
            type="string",
            description="The episode store to upload into: a folder on the shared filesystem or an "
            "s3://BUCKET/PREFIX; registered rows point at the stored objects.",
        ),
        "warehouse": Param(
            "",
            type="string",
            description="Warehouse URL; empty means the node's /etc/megahour/warehouse.yml.",
        ),
        "max_workers": Param(
            config.max_workers,
            type="integer",
            minimum=1,
            description="Cap on parallel batches (the bin-packer may choose fewer).",
        ),
        "robot_mapping": Param(
            "",
            type="string",
            description="The robot mapping file (a path or an s3:// object) for ROS bags, ROS 2 MCAP and "
            "HDF5 recordings; empty means <name>.robot.yaml or robot.yaml beside each recording.",
        ),
    }


def build_ingest_dag(config_path: str | Path | None = None) -> DAG:
    """The ingest DAG for the settings at ``config_path`` (default: $MEGAHOUR_INGEST_CONFIG, /etc/...)."""
    config = load_config(config_path)
    common: dict[str, Any] = {
        "partition": config.partition,
        "megahour": config.megahour,
        "runs": config.runs,
        "default_jitter_s": config.stagger_jitter_s,
    }

    def step(name: str, **kwargs: Any) -> SlurmStepOperator:
        kwargs.setdefault("trigger_rule", TriggerRule.NONE_FAILED)
        return SlurmStepOperator(
            task_id=name, step=name, task_display_name=display_name(name), **common, **kwargs
        )

    with DAG(
        dag_id=DAG_ID,
        schedule=None,
        catchup=False,
        # Runs only start when triggered (schedule None), so a paused DAG would only make triggers queue.
        is_paused_upon_creation=False,
        params=dag_params(config),
        default_args={"retries": config.retries, "retry_delay": RETRY_DELAY},
        doc_md=__doc__,
        tags=["megahour", "ingest"],
    ) as dag:
        discover = step("discover", trigger_rule=TriggerRule.ALL_SUCCESS)
        plan = step("plan", deferrable=False)

        @task_group(group_id=BATCH_GROUP, tooltip="one batch of the plan: its critical chain and extras")
        def per_batch(index: Any) -> None:
            chain = [step(name, batch=index) for name in BATCH_CHAIN]
            for upstream, downstream in itertools.pairwise(chain):
                upstream >> downstream
            transcode = chain[BATCH_CHAIN.index("transcode")]
            for name in NONCRITICAL_AFTER_TRANSCODE:
                transcode >> step(name, batch=index)

        batches = per_batch.expand(index=plan.output)
        summary = step(
            "summary",
            trigger_rule=TriggerRule.ALL_DONE,
            final_exit_codes=(SUMMARY_CRITICAL_FAILED_EXIT,),
        )
        discover >> plan >> batches >> summary
        # summary also follows plan directly, so it has a path to plan when there are no batches.
        plan >> summary
    return dag
