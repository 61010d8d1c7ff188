"""A thin adapter over Slurm's command-line tools; nothing else in megahour runs them.

``parse`` (nodes, reservations, running jobs, per-node and per-job GPUs) and ``jobs`` (batch jobs:
states, ``JobStatus``, the sbatch/squeue/scontrol/sacct/scancel calls) hold the pure command lines and
parsers; ``comment`` the health stamp in a node's Comment. ``client.SlurmClient`` runs the commands
through subprocess with a timeout and raises ``SlurmQueryError`` on any failure so callers can fail
closed; ``async_client.AsyncSlurmClient`` runs the job commands from asyncio (the Airflow triggerer)
and answers with a value or the problem instead of raising.
"""
