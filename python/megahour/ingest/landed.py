"""Recordings in a landing zone in a bucket, copied into the run's staging folder for the steps that read
them: a recording file once (a retry reuses the copy), with the robot mapping files beside it; a LeRobot
dataset an episode at a time, that is its meta/ and the one data file and video files the episode is in,
not the whole dataset.

Discovery finds the datasets (folders or prefixes with meta/info.json) in a landing zone and lists their
episodes from meta/ (a copy of it, for a bucket); each episode is an entry ``<dataset>#episode=<n>`` of
the run (``robotlogs.lerobot.episode_ref``). A dataset whose meta/ names a file that is not there yet (an
upload or copy in progress) is left for a later run, so no good episode is quarantined for it.
"""

from __future__ import annotations

import fcntl
import tempfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from megahour.atomicio import atomic_write_text
from megahour.episodes.errors import EpisodeError
from megahour.objectstore import store
from megahour.objectstore.location import Location, parse
from megahour.objectstore.store import ObjectInfo, ObjectMissing

META = "meta"


def fetch_once(info: ObjectInfo, dest: Path) -> None:
    """``dest`` as a copy of the object: fetched unless the copy beside its tag (size and ETag) is of this
    very object, so a retry copies nothing and a re-uploaded object is fetched again. Batches running
    together share a dataset's files: a lock beside ``dest`` makes one fetch them and the others wait."""
    tag = dest.with_name(f".{dest.name}.etag")
    stamp = f"{info.size} {info.etag}"
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.with_name(f".{dest.name}.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if dest.exists() and tag.exists() and tag.read_text() == stamp:
            return
        store.fetch(info.location, dest)
        atomic_write_text(tag, stamp)


def fetch_mappings(recording: Location, stem: str, landed: Path) -> None:
    """The robot mapping files beside a recording (``<stem>.robot.yaml``, ``robot.yaml``) into
    ``landed``; they are small, so fetched every time: a corrected mapping is used on the retry."""
    for name in (f"{stem}.robot.yaml", "robot.yaml"):
        try:
            store.fetch(recording.sibling(name), landed / name)
        except ObjectMissing:
            (landed / name).unlink(missing_ok=True)


def _relative(folder: Location, info: ObjectInfo) -> str:
    return str(PurePosixPath(info.location.key).relative_to(folder.key.rstrip("/")))


def fetch_meta(folder: Location, dest: Path, objects: list[ObjectInfo] | None = None) -> None:
    """The dataset's meta/ files into ``dest``/meta (``objects``: the dataset's listing, when known)."""
    for info in objects if objects is not None else store.list_tree(folder.child(META)):
        relative = _relative(folder, info)
        if relative.startswith(f"{META}/"):
            fetch_once(info, dest / relative)


def dataset_entries(
    landing: str, skipped: list[str], log: Callable[[str], None] | None = None
) -> list[ObjectInfo]:
    """One entry per episode of each LeRobot dataset directly in the landing zone (a folder or a bucket
    prefix), with the dataset's bytes shared out. A dataset megahour cannot list (a format it does not
    read, a copy in progress) is left for a later run and named in ``skipped``. StoreError when the store
    fails."""
    out = []
    for folder in store.list_folders(landing):
        if folder.name.startswith(".") or not store.exists(folder.child(f"{META}/info.json")):
            continue
        found = _dataset_entries(folder, skipped)
        if found and log is not None:
            log(f"discover: {folder.url}: LeRobot dataset, {len(found)} episodes")
        out += found
    return out


def _dataset_entries(folder: Location, skipped: list[str]) -> list[ObjectInfo]:
    from megahour.robotlogs import lerobot

    with tempfile.TemporaryDirectory(prefix="megahour-dataset-") as scratch:
        try:
            objects = store.list_tree(folder)
            meta_root = scratch if folder.remote else folder.key
            if folder.remote:
                fetch_meta(folder, Path(scratch), objects)
            files = lerobot.dataset_files(meta_root)
        except (EpisodeError, ObjectMissing, OSError, ValueError) as exc:
            skipped.append(f"{folder.url}: {str(exc).replace(scratch, folder.url)}")
            return []
    present = {_relative(folder, info) for info in objects}
    missing = sorted({f for names in files.values() for f in names} - present)
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        skipped.append(
            f"{folder.url}: {missing[0]}{more}, named by its meta/, is not there yet (an upload or copy in "
            "progress); the next run takes it"
        )
        return []
    share = sum(info.size for info in objects) // max(1, len(files))
    return [
        ObjectInfo(Location(folder.scheme, folder.bucket, lerobot.episode_ref(folder.key, i)), share)
        for i in sorted(files)
    ]


def fetch_episode(ref: str, landed: Path) -> str:
    """Episode ``ref`` of a dataset in a bucket as a local episode ref under ``landed``/<dataset>: the
    dataset's meta/, then the files that episode is read from, and the robot mapping files beside the
    dataset. What the conversion would refuse (the episode is gone from meta/, a file vanished from the
    bucket since discovery) is left as it is, so the conversion quarantines the episode with the reason;
    a store that fails is StoreError (the step retries)."""
    from megahour.robotlogs import lerobot

    root, index = lerobot.split_ref(ref) or ("", -1)
    folder = parse(root)
    local = landed / folder.name
    fetch_meta(folder, local)
    try:
        files = lerobot.episode_files(local, index)
    except EpisodeError:
        files = []
    for relative in files:
        try:
            fetch_once(store.bucket(folder.bucket).head(folder.child(relative).key), local / relative)
        except ObjectMissing:
            (local / relative).unlink(missing_ok=True)
    fetch_mappings(folder, folder.name, landed)
    return lerobot.episode_ref(local, index)
