"""The ingestion settings the airflow role renders to /etc/megahour/ingest.yml, as a typed record."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import yaml

from megahour.ingest.binpack import Constraints
from megahour.objectstore.location import LocationError
from megahour.objectstore.location import parse as parse_location

DEFAULT_PATH = Path("/etc/megahour/ingest.yml")
ENV_PATH = "MEGAHOUR_INGEST_CONFIG"
MB = 1_000_000


class IngestConfigError(ValueError):
    """The ingest settings are unusable; the message names the key and the fix."""


@dataclass(frozen=True)
class IngestConfig:
    landing: str = "/srv/megahour/landing"
    storage: str = "/srv/megahour/storage"
    runs: str = "/srv/megahour/ingest/runs"
    partition: str = "ingest"
    megahour: str = "/usr/local/bin/megahour"
    max_workers: int = 2
    # Raw MB/s one worker gets through (validate + transcode + upload: CPU-bound, about 2 MB/s per core
    # for 2-camera 30 Hz episodes here; benchmarks/ingest.py measures it).
    worker_bandwidth_mb_s: float = 2.0
    network_mb_s: float = 1000.0
    db_rows_per_s: float = 500.0
    # Serial cost each extra worker adds to a run (its job submission and start), in seconds.
    worker_overhead_s: float = 0.5
    stagger_jitter_s: float = 5.0
    retries: int = 2
    pattern: str = "vla"  # the read pattern transcode sizes the GOP for

    def __post_init__(self) -> None:
        for name in ("landing", "storage", "runs", "megahour"):
            value = str(getattr(self, name))
            if name in ("landing", "storage") and value.startswith("s3://"):
                try:  # a bucket prefix: the landing zone robots upload to, the episode store
                    parse_location(value)
                except LocationError as exc:
                    raise IngestConfigError(f"{name}: {exc}") from None
            elif not value.startswith("/"):
                hint = " or s3://BUCKET/PREFIX" if name in ("landing", "storage") else ""
                raise IngestConfigError(f"{name}={value!r}: give an absolute path{hint}")
        if self.max_workers < 1:
            raise IngestConfigError(f"max_workers={self.max_workers}: allow at least one worker")
        for name in ("worker_bandwidth_mb_s", "network_mb_s", "db_rows_per_s"):
            if not getattr(self, name) > 0:
                raise IngestConfigError(f"{name}={getattr(self, name)}: must be positive")
        if self.stagger_jitter_s < 0 or self.retries < 0 or self.worker_overhead_s < 0:
            raise IngestConfigError("stagger_jitter_s, worker_overhead_s and retries must not be negative")

    def to_dict(self) -> dict:
        return asdict(self)

    def constraints(self, max_workers: int | None = None) -> Constraints:
        """The bin-packer's constraints from these settings (``max_workers`` overrides the setting)."""
        return Constraints(
            max_workers=max_workers or self.max_workers,
            worker_bytes_per_s=self.worker_bandwidth_mb_s * MB,
            network_bytes_per_s=self.network_mb_s * MB,
            db_rows_per_s=self.db_rows_per_s,
            worker_overhead_s=self.worker_overhead_s,
        )

    @classmethod
    def from_dict(cls, data: dict, where: str = "ingest settings") -> IngestConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise IngestConfigError(
                f"{where}: unknown keys {', '.join(unknown)}; the keys are {', '.join(sorted(known))}"
            )
        try:
            return cls(**data)
        except TypeError as exc:
            raise IngestConfigError(f"{where}: {exc}") from None


def load_config(path: str | Path | None = None) -> IngestConfig:
    """The settings at ``path``, $MEGAHOUR_INGEST_CONFIG or /etc/megahour/ingest.yml (defaults if absent)."""
    explicit = path is not None or ENV_PATH in os.environ
    path = Path(path or os.environ.get(ENV_PATH) or DEFAULT_PATH)
    try:
        text = path.read_text()
    except FileNotFoundError:
        if explicit:
            raise IngestConfigError(
                f"{path}: no such file; deploy the airflow role or point {ENV_PATH} at the settings"
            ) from None
        return IngestConfig()
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise IngestConfigError(f"{path}: not YAML ({exc})") from None
    if not isinstance(data, dict):
        raise IngestConfigError(f"{path}: expected a mapping of settings")
    return IngestConfig.from_dict(data, str(path))
