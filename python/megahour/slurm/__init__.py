"""A thin adapter over Slurm's command-line tools (sinfo, squeue, scontrol).

``parse`` holds the pure parsers for the exact command lines ``client`` runs;
``client`` runs them through subprocess with a timeout and raises
``SlurmQueryError`` on any failure so callers can fail closed.
"""
