"""Delivery: episodes from the under-store to the trainer through the cluster's NVMe cache.

- ``pages``: which cache pages and owned page ranges a byte range touches (pure);
- ``ownership``: the owner worker of each (file, page range) by rendezvous hashing, with fallbacks (pure);
  and Alluxio 2.9's modulo policy for comparison.

Not built yet (issue 7): the Alluxio role, the loader that reads through the owners' S3 proxies, cache
warm-up from a manifest and `megahour cache status`.
"""
