"""Episode container: simulated robot episodes, the read-pattern layout, writer and sample reader.

Layering (see docs/episodes.md):
- ``model``, ``layout``, ``errors`` are pure: dataclasses and planning math, no I/O.
- ``schemas`` encodes and decodes the foxglove protobuf messages.
- ``video`` wraps PyAV (H.264 encode, decode from a keyframe; JPEG).
- ``mcapio`` writes and indexes MCAP files; ``source`` does ranged reads (local, fsspec, HTTP).
- ``transcode`` turns a raw per-frame-JPEG episode into the tuned container; ``reader`` reads samples.
- ``sim`` renders seeded pybullet episodes in the raw form robots record.

The heavy dependencies (mcap, av, numpy, pybullet) come with the ``episodes`` extra and are imported
inside these modules only, so the rest of megahour installs without them.
"""
