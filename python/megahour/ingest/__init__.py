"""Ingestion: raw episodes from a landing zone into storage and the warehouse.

- ``binpack``: the worker count and byte-balanced batches (pure);
- ``steps``: each step's Slurm resources, critical flag and the run's outcome (pure);
- ``work``: the steps themselves (validate, transcode, upload, register, previews, QC, summary);
- ``airflow_dag`` / ``slurm_operator``: the Airflow 3 DAG that runs each step as a Slurm job;
- ``monolithic``: the single-process baseline the benchmark compares against;
- ``landing``: simulated raw episodes (some corrupt) for tests, drills and benchmarks.
"""
