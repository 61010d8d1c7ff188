"""The ingestion steps themselves: each reads its inputs from the run folder and writes one result.

A step is safe to run again (a retry after a kill, or a whole rerun): outputs go through temporary
files and renames, uploads skip objects already stored with the same digest, and warehouse rows are
upserts that skip episodes already registered identically. A step's result file is written last, so
its presence means the step finished.

Corrupt raw episodes never stop a batch: each is copied to the store's ``quarantine/`` folder, given a
reason row in the warehouse's quarantine table, and left out of the later steps.
"""

from __future__ import annotations

import datetime as dt
import errno
import io
import itertools
import json
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from megahour.atomicio import atomic_write_text, discard_temps
from megahour.curation import episodes_table, schema
from megahour.curation.warehouse import Warehouse, open_warehouse
from megahour.episodes import mcapio, mcapscan
from megahour.episodes.errors import EpisodeError
from megahour.episodes.layout import read_pattern
from megahour.episodes.source import LocalSource, open_source
from megahour.episodes.transcode import TranscodeOptions, transcode
from megahour.ingest import binpack, landed, object_store, quarantine
from megahour.ingest.config import IngestConfig
from megahour.ingest.landing import LABEL_KEYS, LABELS_METADATA
from megahour.ingest.runfiles import RunDir, RunDirError, write_json
from megahour.ingest.steps import enabled_steps, run_outcome, spec
from megahour.objectstore import store
from megahour.objectstore.location import LocationError, is_remote, parse
from megahour.objectstore.store import ObjectInfo, ObjectMissing, StoreError

INGEST_VERSION = 1
EPISODES_KEY = "episodes"
QUARANTINE_KEY = "quarantine"
# What a broken raw file can raise while it is read, checked or transcoded: the episode layer's typed
# errors, and the OS/codec errors of damaged bytes (Pillow's UnidentifiedImageError is an OSError).
EPISODE_FAILURES = (EpisodeError, OSError, ValueError, EOFError)
# OSErrors that say something about this node or the filesystem, not the episode: the step must fail and
# be retried (or fixed), never quarantine a good episode.
ENVIRONMENT_ERRNOS = frozenset(
    {
        errno.EACCES,
        errno.EPERM,
        errno.ENOSPC,
        errno.EIO,
        errno.ESTALE,
        errno.ENOMEM,
        errno.EROFS,
        errno.EDQUOT,
    }
)
SAFE_EPISODE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")

Log = Callable[[str], None]
# The keys a run's params may hold (the Airflow DAG's params; a test keeps the two in step).
RUN_PARAMS = (
    "steps",
    "jitter_s",
    "fail_steps",
    "landing",
    "storage",
    "warehouse",
    "max_workers",
    "robot_mapping",
)
# Recordings the landing zone takes: megahour's raw MCAP, ROS 2 MCAP, ROS 1 bags and HDF5 episodes.
LANDING_SUFFIXES = (".mcap", ".bag", ".hdf5", ".h5")
CONVERTED_DIR = "converted"
LANDED_DIR = "landed"  # local copies of recordings from a landing zone in a bucket


class StepFailed(RuntimeError):
    """The step cannot finish; the message says why and what to do."""


class ConfigFailed(StepFailed):
    """The run's settings are wrong for a recording (no robot mapping, or one that lacks what it needs):
    the step fails and nothing is quarantined, since the fix is the lab's, not the episode's."""


class DrillFailure(StepFailed):
    """The run's ``fail_steps`` param asked this step to fail (a drill of the non-critical path)."""


@dataclass
class StepContext:
    run: RunDir
    config: IngestConfig
    params: dict
    log: Log
    _warehouse: Warehouse | None = None
    _mapping_file: str | None = None  # the run's robot_mapping as a local file, resolved once per step

    @property
    def run_id(self) -> str:
        return self.run.path.name

    @property
    def storage(self) -> str:
        """The episode store: a folder, or an S3 bucket prefix (``s3://BUCKET/PREFIX``)."""
        return str(self.params.get("storage") or self.config.storage)

    def warehouse(self) -> Warehouse:
        if self._warehouse is None:
            self._warehouse = open_warehouse(self.params.get("warehouse") or None)
        return self._warehouse


def normalize_params(params: dict | None, config: IngestConfig) -> dict:
    """The DAG run's params with defaults filled in, checked (a typo in a step name is refused)."""
    params = dict(params or {})
    known = set(RUN_PARAMS)
    unknown = sorted(set(params) - known)
    if unknown:
        raise StepFailed(
            f"unknown run params {', '.join(unknown)}; the params are {', '.join(sorted(known))}"
        )
    if "@" in str(params.get("warehouse") or ""):
        raise StepFailed(
            "the warehouse param must not carry credentials (it is stored in run.json and job logs); "
            "give the URL only and keep the password in the node's /etc/megahour/warehouse.yml"
        )
    steps = enabled_steps(params.get("steps"))
    fail_steps = list(params.get("fail_steps") or [])
    enabled_steps(dict.fromkeys(fail_steps, True))  # same name check
    return {
        "steps": steps,
        "jitter_s": float(params.get("jitter_s", config.stagger_jitter_s)),
        "fail_steps": fail_steps,
        "landing": params.get("landing") or config.landing,
        "storage": params.get("storage") or config.storage,
        "warehouse": params.get("warehouse") or "",
        "max_workers": int(params.get("max_workers") or config.max_workers),
        "robot_mapping": params.get("robot_mapping") or "",
    }


def execute(
    step: str,
    run_dir: str | Path,
    batch: int | None = None,
    params: dict | None = None,
    config: IngestConfig | None = None,
    log: Log = print,
    warehouse: Warehouse | None = None,
) -> dict:
    """Run one step; returns its result (also written to the run folder). Raises StepFailed."""
    step_spec = spec(step)
    config = config or IngestConfig()
    run = RunDir(run_dir)
    if step_spec.per_batch and batch is None:
        raise StepFailed(f"step {step} runs per batch; pass --batch N (0..batches-1)")
    if not step_spec.per_batch and batch is not None:
        raise StepFailed(f"step {step} runs once per run; drop --batch")
    if step == "discover":
        run_params = normalize_params(params, config)
        run.path.mkdir(parents=True, exist_ok=True)
        # discover starts the run over: results and the plan of an earlier try of this run are stale.
        run.plan_json.unlink(missing_ok=True)
        for stale in run.steps.glob("*.json") if run.steps.is_dir() else ():
            stale.unlink()
        write_json(run.run_json, {"params": run_params, "config": config.to_dict(), "run_id": run.path.name})
    else:
        run_params = run.run()["params"]
    ctx = StepContext(run, config, run_params, log, warehouse)
    if not run_params["steps"].get(step, True):
        log(f"{step}: switched off for this run")
        return {"status": "off"}
    if step in run_params["fail_steps"]:
        raise DrillFailure(f"{step}: failing on purpose (the run's fail_steps drill)")
    # A rerun (a cleared task, a cleared run) must not be judged by what an earlier try left behind.
    run.result_path(step, batch).unlink(missing_ok=True)
    began = time.perf_counter()
    result = _STEPS[step](ctx, batch) if step_spec.per_batch else _STEPS[step](ctx)
    result["seconds"] = round(time.perf_counter() - began, 3)
    if step != "summary":
        run.write_result(step, batch, result)
    return result


# -- run-level steps ----------------------------------------------------------------------------------


def landing_files(landing: str | Path, skipped: list[str] | None = None) -> list[ObjectInfo]:
    """The recordings in a landing zone (a folder or a bucket prefix), sorted; hidden files are uploads
    still in flight. A LeRobot dataset (a sub-folder or sub-prefix with meta/info.json) gives one entry
    per episode (``<dataset>#episode=<n>``, each with the dataset's bytes shared out)."""
    found = [
        info
        for info in store.list_folder(str(landing))
        if Path(info.location.name).suffix.lower() in LANDING_SUFFIXES
        and not info.location.name.startswith(".")
    ]
    found += landed.dataset_entries(str(landing), skipped if skipped is not None else [])
    return sorted(found, key=lambda info: info.location.key)


def discover(ctx: StepContext) -> dict:
    landing = str(ctx.params["landing"])
    if not is_remote(landing) and not Path(landing).is_dir():
        raise StepFailed(f"landing zone {landing} does not exist; create it or pass the landing param")
    # A new try of the run: copies and conversions of an earlier try may be of older uploads.
    for stale in (LANDED_DIR, CONVERTED_DIR):
        shutil.rmtree(ctx.run.staging / stale, ignore_errors=True)
    skipped: list[str] = []
    try:
        files = [{"path": info.url, "bytes": info.size} for info in landing_files(landing, skipped)]
    except StoreError as exc:
        raise StepFailed(f"discover: {exc}") from None
    for line in skipped:
        ctx.log(f"discover: skipped {line}")
    ctx.log(f"discover: {len(files)} raw episodes in {landing}")
    return {"landing": landing, "files": files, "skipped": skipped}


def plan(ctx: StepContext) -> dict:
    found = ctx.run.result("discover")
    if found is None:
        raise StepFailed("plan needs the discover result; run discover first")
    files = found["files"]
    if not files:
        result = {"workers": 0, "batches": [], "batch_bytes": [], "files": [], "limited_by": "files"}
        write_json(ctx.run.plan_json, result)
        return result
    constraints = ctx.config.constraints(ctx.params["max_workers"])
    chosen = binpack.plan([f["bytes"] for f in files], constraints)
    result = chosen.to_dict()
    result["files"] = [[files[i]["path"] for i in batch] for batch in chosen.batches]
    write_json(ctx.run.plan_json, result)
    ctx.log(
        f"plan: {len(files)} files into {chosen.workers} batches (limited by {chosen.limited_by}), "
        f"max/mean bytes {chosen.balance:.4f}"
    )
    return {k: result[k] for k in ("workers", "batch_bytes", "limited_by", "balance", "makespan_s")}


# -- per-batch steps ----------------------------------------------------------------------------------


def _batch_files(ctx: StepContext, batch: int) -> list[str]:
    batches = ctx.run.plan()["files"]
    if not 0 <= batch < len(batches):
        raise StepFailed(f"batch {batch} is not in the plan ({len(batches)} batches)")
    return batches[batch]


def raw_info(path: str, index: mcapio.EpisodeIndex | None = None) -> dict:
    """Labels and times of a raw episode, from its summary section (cheap: no chunk is read).

    A recording without a usable summary (written unindexed, or cut short by a crash) is scanned whole.
    """
    if index is None:
        with LocalSource(path) as source:
            index = mcapio.open_index(source, scan_unindexed=True)
    labels = dict(index.metadata.get(LABELS_METADATA) or {})
    missing = [k for k in LABEL_KEYS if not labels.get(k)]
    if missing:
        raise StepFailed(
            f"{path}: no {', '.join(missing)} in the {LABELS_METADATA} metadata; the recorder must write "
            "the episode's labels"
        )
    episode_id = labels.get("episode_id") or Path(path).stem
    if not SAFE_EPISODE_ID.match(episode_id) or ".." in episode_id:
        raise StepFailed(
            f"{path}: episode id {episode_id!r} is not a safe file name; the recorder must use letters, "
            "digits, '.', '_' and '-' only"
        )
    return {
        "episode_id": episode_id,
        "source": path,
        "labels": {k: labels[k] for k in LABEL_KEYS},
        "start_ns": index.start_ns,
        "duration_s": (index.end_ns - index.start_ns) / 1e9,
    }


def check_raw(path: str) -> dict:
    """Read every message (chunk CRCs, decompression, time order) and decode each camera's first frame."""
    from PIL import Image

    from megahour.episodes import schemas

    with LocalSource(path) as source:
        scan = mcapscan.scan(source)  # once: the labels and the messages both come from it
    info = raw_info(path, mcapio.index_from_scan(scan))
    recording = mcapio.recording_from_scan(scan)
    cameras = recording.cameras()
    if not cameras:
        raise EpisodeError(path, "no camera topic", fix="record at least one camera")
    for camera in cameras:
        frames = recording.messages[camera.topic]
        if not frames:
            raise EpisodeError(path, "camera topic has no frames", topic=camera.topic, fix="re-record it")
        Image.open(io.BytesIO(schemas.decode_payload(camera.schema, frames[0].data))).load()
    info["messages"] = sum(len(m) for m in recording.messages.values())
    if recording.warnings:
        info["warnings"] = recording.warnings
    return info


def _quarantine(ctx: StepContext, path: str, episode_id: str, reason: str, landed: str = "") -> dict:
    """Keep the recording at ``path`` (``landed``: the local copy of a recording in a bucket). An episode
    of a LeRobot dataset is not copied (its bytes are shared with the dataset's other episodes): the
    row points at it where it lies."""
    if _dataset_episode(path) is not None:
        kept_uri = path
    else:
        kept_uri = object_store.put(
            Path(landed or path), ctx.storage, f"{QUARANTINE_KEY}/{parse(path).name}"
        ).uri
    quarantine.record(
        ctx.warehouse(),
        [
            quarantine.QuarantineRecord(
                episode_id=episode_id,
                source=path,
                stored=kept_uri,
                reason=reason,
                run_id=ctx.run_id,
                quarantined_at=dt.datetime.now(dt.UTC),
            )
        ],
    )
    ctx.log(f"quarantined {episode_id}: {reason}")
    return {"episode_id": episode_id, "source": path, "stored": kept_uri, "reason": reason}


def _dataset_episode(path: str) -> tuple[Path, int] | None:
    from megahour.robotlogs import lerobot

    return lerobot.parse_ref(path)


def fetch_landed(ctx: StepContext, path: str) -> str:
    """The recording at ``path`` as a local file: itself, or (a landing zone in a bucket) its copy under
    staging/landed/, fetched once with the robot mapping files beside it (a retry reuses the copy); an
    episode of a dataset in a bucket as a local episode ref (``landed.fetch_episode``)."""
    if not is_remote(path):
        return path
    staging = ctx.run.staging / LANDED_DIR
    try:
        if _dataset_episode(path) is not None:
            return landed.fetch_episode(path, staging)
        location = parse(path)
        local = staging / location.name
        landed.fetch_once(store.bucket(location.bucket).head(location.key), local)
        landed.fetch_mappings(location, Path(location.name).stem, staging)
    except StoreError as exc:
        raise StepFailed(f"{path}: {exc}") from None
    return str(local)


def _mapping_param(ctx: StepContext) -> str:
    """The run's robot_mapping param as a local file: one in a bucket is fetched once per step (so a
    corrected mapping is used on the retry). Steps call it before their per-recording loop: a missing or
    unreachable mapping fails the step, it never quarantines a recording."""
    if ctx._mapping_file is not None:
        return ctx._mapping_file
    param = ctx.params.get("robot_mapping", "")
    if is_remote(param):
        try:
            local = ctx.run.staging / LANDED_DIR / ".mappings" / parse(param).name
            store.fetch(param, local)
        except LocationError as exc:
            raise ConfigFailed(f"robot_mapping: {exc}") from None
        except ObjectMissing:
            raise ConfigFailed(f"robot_mapping {param} does not exist; upload it or drop the param") from None
        except StoreError as exc:
            raise StepFailed(f"robot_mapping: {exc}") from None
        param = str(local)
    ctx._mapping_file = param
    return param


def mapping_for(recording: Path, param: str = "") -> Path:
    """The robot mapping file for a recording: the run's ``robot_mapping`` param, else the first of
    ``<name>.robot.yaml``, ``robot.yaml`` beside it. StepFailed (nothing is quarantined) when none exists:
    the mapping is the lab's to write, not the episode's fault."""
    if param:
        chosen = Path(param)
        if not chosen.is_file():
            raise ConfigFailed(
                f"robot_mapping {chosen} does not exist; write it (docs/ingest.md) or drop the param"
            )
        return chosen
    for candidate in (recording.with_name(f"{recording.stem}.robot.yaml"), recording.with_name("robot.yaml")):
        if candidate.is_file():
            return candidate
    raise ConfigFailed(
        f"{recording}: no robot mapping ({recording.stem}.robot.yaml or robot.yaml beside it); write one "
        "(docs/ingest.md, 'Bringing your own robot logs') or pass the robot_mapping param"
    )


def as_raw(ctx: StepContext, path: str) -> tuple[str, dict | None]:
    """The raw episode to read for ``path``: itself, or its conversion under staging/converted/ (made once;
    a retry reuses it). The conversion report comes with a converted one."""
    from megahour.robotlogs import formats
    from megahour.robotlogs.mapping import MappingError, load_mapping

    dataset_episode = _dataset_episode(path)
    if dataset_episode is None and formats.detect(path) == formats.MEGAHOUR_MCAP:
        return path, None
    # By the whole name: ep1.bag and ep1.h5 in one landing zone are two recordings.
    name = (
        Path(path).name
        if dataset_episode is None
        else f"{dataset_episode[0].name}-episode-{dataset_episode[1]}"
    )
    out = ctx.run.staging / CONVERTED_DIR / f"{name}.mcap"
    report_path = out.with_suffix(".json")
    if out.exists() and report_path.exists():
        return str(out), json.loads(report_path.read_text())
    mapping_path = mapping_for(dataset_episode[0] if dataset_episode else Path(path), _mapping_param(ctx))
    try:
        mapping = load_mapping(mapping_path)
    except MappingError as exc:
        raise ConfigFailed(str(exc)) from None
    out.parent.mkdir(parents=True, exist_ok=True)
    discard_temps(out)
    try:
        if dataset_episode is None:
            report = formats.convert_file(path, out, mapping).to_dict()
        else:
            report = formats.convert_lerobot_episode(*dataset_episode, out, mapping).to_dict()
    except MappingError as exc:  # the mapping lacks what this recording needs: the lab's to fix
        raise ConfigFailed(str(exc)) from None
    report["mapping"] = str(mapping_path)
    write_json(report_path, report)
    return str(out), report


def _quarantine_id(path: str, local: str) -> str:
    dataset_episode = _dataset_episode(path)
    if dataset_episode is not None:  # the id its conversion would have had
        from megahour.robotlogs import lerobot

        return lerobot.episode_id(dataset_episode[0].name, dataset_episode[1])
    return Path(local).stem


def validate(ctx: StepContext, batch: int) -> dict:
    ok, bad = [], []
    _mapping_param(ctx)
    for path in _batch_files(ctx, batch):
        local = fetch_landed(ctx, path)
        try:
            raw, converted = as_raw(ctx, local)
            info = check_raw(raw)
            if converted is not None or local != path:
                info["recording"] = path
            if converted is not None:
                info["conversion"] = {k: converted[k] for k in ("format", "problems", "warnings", "mapping")}
                for problem in converted["problems"]:
                    ctx.log(f"validate {path}: {problem}")
            ok.append(info)
            for warning in ok[-1].get("warnings", []):
                ctx.log(f"validate {path}: {warning}")
        except ConfigFailed:
            raise
        except (*EPISODE_FAILURES, StepFailed) as exc:
            _not_the_episode(exc, path)
            bad.append(
                _quarantine(ctx, path, _quarantine_id(path, local), _reason(exc, path, local), landed=local)
            )
    ctx.log(f"validate batch {batch}: {len(ok)} good, {len(bad)} quarantined")
    return {"ok": ok, "quarantined": bad}


def _not_the_episode(exc: BaseException, path: str) -> None:
    """Raise StepFailed when ``exc`` is the node's or the filesystem's fault (the step retries)."""
    if isinstance(exc, OSError) and exc.errno in ENVIRONMENT_ERRNOS:
        raise StepFailed(
            f"{path}: {exc.strerror} ({errno.errorcode.get(exc.errno, exc.errno)}); this is the node's or "
            "the shared filesystem's problem, not the episode's: fix permissions or space, and the retry "
            "resumes"
        ) from exc


def _reason(exc: BaseException, path: str = "", local: str = "") -> str:
    """The quarantine reason; a recording fetched from a bucket is named by its URL, not by its copy."""
    from megahour.robotlogs import lerobot

    text = f"{type(exc).__name__}: {exc}".strip()
    if local and local != path:
        copy, source = ((lerobot.split_ref(p) or (p, 0))[0] for p in (local, path))
        text = text.replace(copy, source)
    return text[:1000]


def _validated(ctx: StepContext, batch: int) -> list[dict]:
    """The batch's good episodes: validate's list, or (validate switched off) every planned file."""
    checked = ctx.run.result("validate", batch)
    if checked is not None:
        return checked["ok"]
    episodes = []
    _mapping_param(ctx)
    for path in _batch_files(ctx, batch):
        local = fetch_landed(ctx, path)
        try:
            raw, converted = as_raw(ctx, local)
            info = raw_info(raw)
            if converted is not None or local != path:
                info["recording"] = path
            episodes.append(info)
        except ConfigFailed:
            raise
        except (*EPISODE_FAILURES, StepFailed) as exc:
            _not_the_episode(exc, path)
            _quarantine(ctx, path, _quarantine_id(path, local), _reason(exc, path, local), landed=local)
    return episodes


def transcode_batch(ctx: StepContext, batch: int) -> dict:
    ctx.run.staging.mkdir(parents=True, exist_ok=True)
    options = TranscodeOptions(pattern=ctx.config.pattern)
    done, bad = [], []
    for episode in _validated(ctx, batch):
        episode_id = episode["episode_id"]
        out = ctx.run.staging / f"{episode_id}.mcap"
        report_path = ctx.run.staging / f"{episode_id}.json"
        discard_temps(out)  # a transcode killed part-way; the retry starts it over
        for legacy in ctx.run.staging.glob(f".{episode_id}.mcap.*.partial"):  # ... by the older writer
            legacy.unlink(missing_ok=True)
        if out.exists() and report_path.exists():
            report = json.loads(report_path.read_text())
        else:
            try:
                report = transcode(episode["source"], out, options).to_dict()
            except EPISODE_FAILURES as exc:
                # A converted recording is quarantined as the lab recorded it, not as megahour's conversion.
                recorded = episode.get("recording", episode["source"])
                _not_the_episode(exc, recorded)
                bad.append(
                    _quarantine(ctx, recorded, episode_id, _reason(exc), landed=_landed_copy(ctx, recorded))
                )
                continue
            atomic_write_text(report_path, json.dumps(report, sort_keys=True))
        done.append({**episode, "staged": str(out), "frames": report["frames"]})
    ctx.log(f"transcode batch {batch}: {len(done)} episodes, {len(bad)} quarantined")
    return {"done": done, "quarantined": bad}


def _transcoded(ctx: StepContext, batch: int, step: str) -> list[dict]:
    result = ctx.run.result("transcode", batch)
    if result is None:
        raise StepFailed(
            f"{step} batch {batch} needs the transcode result; transcode is off or has not finished"
        )
    return result["done"]


def _landed_copy(ctx: StepContext, recording: str) -> str:
    """The local copy of a recording in a bucket (the one validate fetched, else fetched again); ""
    for a file."""
    if not is_remote(recording):
        return ""
    local = ctx.run.staging / LANDED_DIR / parse(recording).name
    return str(local) if local.exists() else fetch_landed(ctx, recording)


def upload(ctx: StepContext, batch: int) -> dict:
    uploaded = []
    for episode in _transcoded(ctx, batch, "upload"):
        try:
            put = object_store.put(
                Path(episode["staged"]), ctx.storage, f"{EPISODES_KEY}/{episode['episode_id']}.mcap"
            )
        except StoreError as exc:
            raise StepFailed(f"upload: {exc}") from None
        uploaded.append(
            {**episode, "uri": put.uri, "bytes": put.bytes, "sha256": put.sha256, "copied": put.copied}
        )
    copied = sum(u["copied"] for u in uploaded)
    ctx.log(f"upload batch {batch}: {copied} copied, {len(uploaded) - copied} already stored")
    return {"uploaded": uploaded}


def episode_record(episode: dict, pattern: str) -> schema.EpisodeRecord:
    labels = episode["labels"]
    # The stored object (staging may be gone): a file:// URI or an object in the episode bucket.
    with open_source(episode["uri"]) as src:
        layout = mcapio.open_index(src).layout() or {}
    return schema.EpisodeRecord(
        episode_id=episode["episode_id"],
        robot=labels["robot"],
        embodiment=labels["embodiment"],
        task=labels["task"],
        site=labels["site"],
        operator=labels["operator"],
        start_time=dt.datetime.fromtimestamp(episode["start_ns"] // 1_000_000_000, dt.UTC),
        duration_s=float(episode["duration_s"]),
        storage_uri=episode["uri"],
        bytes=int(episode["bytes"]),
        topic_groups=tuple(g["name"] for g in layout.get("groups", [])),
        codec="h264",
        gop_s=float(read_pattern(pattern).gop_s),
        ingest_version=INGEST_VERSION,
        tags=("ingest:megahour",),
    )


def register(ctx: StepContext, batch: int) -> dict:
    result = ctx.run.result("upload", batch)
    if result is None:
        raise StepFailed(f"register batch {batch} needs the upload result; upload is off or has not finished")
    records = [episode_record(e, ctx.config.pattern) for e in result["uploaded"]]
    wh = ctx.warehouse()
    episodes_table.ensure_schema(wh)
    current = {r["episode_id"]: r for r in episodes_table.fetch_records(wh, [r.episode_id for r in records])}
    fresh = [r for r in records if not _same_row(current.get(r.episode_id), r)]
    episodes_table.upsert(wh, fresh)
    ctx.log(f"register batch {batch}: {len(fresh)} upserted, {len(records) - len(fresh)} already registered")
    return {
        "registered": len(fresh),
        "already": len(records) - len(fresh),
        "episode_ids": [r.episode_id for r in records],
    }


def _same_row(row: dict | None, record: schema.EpisodeRecord) -> bool:
    """True when the warehouse already holds this episode as we would write it (a retried register)."""
    if row is None:
        return False
    return (
        row["storage_uri"] == record.storage_uri
        and int(row["bytes"]) == record.bytes
        and int(row["ingest_version"]) == record.ingest_version
    )


def previews(ctx: StepContext, batch: int) -> dict:
    from megahour.episodes import schemas

    written = 0
    for episode in _transcoded(ctx, batch, "previews"):
        with LocalSource(episode["source"]) as source:
            recording = mcapio.read_recording(source)
        for camera in recording.cameras():
            first = recording.messages[camera.topic][0].data
            jpeg = schemas.decode_payload(camera.schema, first)
            name = camera.topic.strip("/").replace("/", "_")
            object_store.put_bytes(jpeg, ctx.storage, f"previews/{episode['episode_id']}/{name}.jpg")
            written += 1
    return {"previews": written}


def qc(ctx: StepContext, batch: int) -> dict:
    metrics = []
    for episode in _transcoded(ctx, batch, "qc"):
        with LocalSource(episode["source"]) as source:
            recording = mcapio.read_recording(source)
        cameras = {}
        for camera in recording.cameras():
            times = [m.log_time for m in recording.messages[camera.topic]]
            gaps = [b - a for a, b in itertools.pairwise(times)]
            expected = camera.rate_hz * episode["duration_s"]
            cameras[camera.topic] = {
                "frames": len(times),
                "expected_frames": round(expected, 1),
                "max_gap_ms": round(max(gaps) / 1e6, 3) if gaps else 0.0,
            }
        record = {
            "episode_id": episode["episode_id"],
            "duration_s": episode["duration_s"],
            "cameras": cameras,
        }
        object_store.put_bytes(
            json.dumps(record, sort_keys=True).encode(), ctx.storage, f"qc/{episode['episode_id']}.json"
        )
        metrics.append(record)
    return {"qc": len(metrics)}


def summary(ctx: StepContext) -> dict:
    try:
        batches = len(ctx.run.plan()["batches"])
    except RunDirError:  # no plan: the per-batch steps count as failed, as reported below
        batches = None
    outcome = run_outcome(ctx.params["steps"], batches, ctx.run.finished())
    totals = {"registered": 0, "quarantined": [], "episode_hours": 0.0, "bytes": 0}
    for b in range(batches or 0):
        for step in ("validate", "transcode"):
            result = ctx.run.result(step, b) or {}
            totals["quarantined"] += result.get("quarantined", [])
        uploaded = (ctx.run.result("upload", b) or {}).get("uploaded", [])
        registered = ctx.run.result("register", b) or {}
        totals["registered"] += len(registered.get("episode_ids", []))
        if registered:
            totals["episode_hours"] += sum(u["duration_s"] for u in uploaded) / 3600
            totals["bytes"] += sum(u["bytes"] for u in uploaded)
    discovered = len((ctx.run.result("discover") or {}).get("files", []))
    report = {
        "run_id": ctx.run_id,
        "succeeded": outcome.succeeded,
        "discovered": discovered,
        "registered": totals["registered"],
        "quarantined": totals["quarantined"],
        "episode_hours": round(totals["episode_hours"], 6),
        "bytes": totals["bytes"],
        "critical_failures": [_label(o) for o in outcome.critical_failures],
        "noncritical_failures": [_label(o) for o in outcome.noncritical_failures],
        "steps_off": sorted({o.step for o in outcome.steps if o.status == "off"}),
    }
    ctx.run.write_result("summary", None, report)
    ctx.log(
        f"summary: {report['registered']} registered, {len(report['quarantined'])} quarantined, "
        f"critical failures {report['critical_failures'] or 'none'}, "
        f"non-critical failures {report['noncritical_failures'] or 'none'}"
    )
    if not outcome.succeeded:
        # Staged episodes stay, so retrying the failed steps does not transcode again.
        raise StepFailed(
            f"critical steps failed: {', '.join(report['critical_failures'])}; their job output is in "
            f"{ctx.run.logs}/<step>-<batch>.try<N>.log. Fix the cause, then clear the failed tasks and "
            "summary"
        )
    # Everything is in storage now: the staged copies would only double the run's disk use.
    for staged in ctx.run.staging.glob("*.mcap") if ctx.run.staging.is_dir() else ():
        staged.unlink()
    shutil.rmtree(ctx.run.staging / CONVERTED_DIR, ignore_errors=True)
    shutil.rmtree(ctx.run.staging / LANDED_DIR, ignore_errors=True)
    return report


def _label(outcome) -> str:
    return outcome.step if outcome.batch is None else f"{outcome.step}[{outcome.batch}]"


_STEPS = {
    "discover": discover,
    "plan": plan,
    "validate": validate,
    "transcode": transcode_batch,
    "upload": upload,
    "register": register,
    "previews": previews,
    "qc": qc,
    "summary": summary,
}
