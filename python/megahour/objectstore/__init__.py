"""Object stores: where episodes, landing zones and the cache's under-store live when they are buckets.

One adapter (``store``, over obstore) for every reader and writer in megahour; ``location`` parses
``s3://BUCKET/KEY`` and local paths; ``credentials`` says where the credentials come from (the
environment, web identity, the container endpoint or the instance profile; never the command line).
"""
