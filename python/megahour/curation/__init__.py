"""Curation: the episodes warehouse (chDB embedded, ClickHouse on clusters) and training manifests.

- ``schema``: the episodes table, its DDL per server version, and drift checks.
- ``sql``: pure SQL building (literals, selections with weights and deterministic sampling).
- ``warehouse``: the two adapters behind one interface (chDB in-process, ClickHouse over HTTP).
- ``store``: create, upsert (idempotent), count.
- ``slicing``: per-rank bounds, record-batch layout and seeded per-epoch permutations (pure).
- ``manifest``: build an uncompressed Arrow IPC manifest; ``fetch`` and ``load`` get it to ranks.
"""
