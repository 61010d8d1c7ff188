"""Delivery: episodes from the under-store to the trainer through the cluster's NVMe cache.

- ``pages``: which cache pages and owned page ranges a byte range touches (pure);
- ``ownership``: the owner worker of each (file, page range) by rendezvous hashing, with fallbacks (pure);
  and Alluxio 2.9's modulo policy for comparison;
- ``client``: ranged reads through the owners' S3 proxies, falling back to the under-store (I/O);
- ``loader``: a rank's manifest rows as samples through the cache, exactly once;
- ``manifests``: manifest rows as loader refs; ``warm``: cache warm-up from a manifest;
- ``status``: per-worker use and the hit ratio (`megahour cache status`);
- ``delayproxy``: the latency-and-stall proxy of the local cluster's emulated remote under-store.

The Alluxio deployment itself is roles/alluxio; see docs/delivery.md.
"""
