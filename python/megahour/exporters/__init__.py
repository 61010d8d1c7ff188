"""megahour's Prometheus collectors: GPU telemetry and Xids (``gpu``), Slurm's nodes and queue (``slurm``),
written through node_exporter's textfile collector by ``megahour metrics gpu|slurm`` (docs/monitoring.md)."""
