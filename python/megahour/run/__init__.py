"""`megahour run`: the job-step wrapper that turns step failures into Slurm's exit-code contract.

Inside one Slurm job it restarts a training step in place after transient (infrastructure)
failures, resets that restart budget whenever a new complete checkpoint lands, and, past the
budget, exits with the code listed in slurm.conf's ``RequeueExit`` so Slurm requeues the job.
Application errors exit with a code Slurm does not requeue. Every attempt leaves a diagnostics
directory ``<trace_root>/<jobid>/attempt-<k>/`` so earlier failures survive later ones.

Modules: ``policy`` (pure decisions), ``checkpoints`` (which checkpoint is newest and complete),
``logtail`` (pure bounded output tail), ``traces`` (attempt directories on disk), ``runner``
(the process loop and signals), ``cli`` (argument parsing for the `megahour run` subcommand).
"""
