"""The drain sweeper run by ``megahour sweep`` on the controller (systemd timer).

``rules`` decides (pure): which of our drained nodes to resume, which of our
stranded reservations to delete, which alerts fire. ``metrics`` renders the
Prometheus textfile. ``sweeper`` queries Slurm, applies the plan and writes
history and metrics atomically; it does nothing when any query fails.
"""
