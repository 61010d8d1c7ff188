"""megahour's Prometheus collectors: GPU telemetry and Xids (``gpu``), Slurm's nodes and queue
(``slurm``), the cache tier (``cache``), ingestion's runs and Airflow's StatsD (``ingest``), the warehouse
(``warehouse``), written through node_exporter's textfile collector by ``megahour metrics
gpu|slurm|cache|ingest|warehouse`` (docs/monitoring.md)."""
