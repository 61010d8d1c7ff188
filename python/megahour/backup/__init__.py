"""Nightly dumps of the databases a cluster keeps its history in (Slurm accounting, Airflow),
and their restore."""
